"""Why a drain could not start, or stopped: told to the operator in one line, never a traceback.

Why it exists: a broker URL that does not parse, a broker that does not answer, and a database
or broker that fails in the middle of a drain are the operator's to fix, and each is said with a
code, the URL masked (no secret anywhere in the text) and what happens next (the batch in hand
stays in the broker). A message never stops a drain (it is quarantined); what does is labelled
infrastructure. Anything else is a bug and is raised as it is.

What it is not: the drain (``migrate/runner.py``) or the quarantine.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psycopg

from ujobs_bridge.errors import DatabaseUnavailableError, ErrorCode, UjobsError
from ujobs_bridge.ext.database import mask_dsn, scrub

if TYPE_CHECKING:
    from migrate.appinfo import AppInfo
    from migrate.source import Source


_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.%]+")


def check_broker_url(url: str) -> None:
    """A broker URL that cannot even be parsed is refused before anything connects, with the
    URL masked and no secret in the message."""
    try:
        if "://" not in url:
            raise ValueError("it has no scheme:// part")
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        if parts.hostname and not _HOST_NAME.fullmatch(parts.hostname):
            raise ValueError(f"the host {parts.hostname!r} is not a host name or an IP address")
    except ValueError as exc:
        raise UjobsError(
            f"the broker URL {mask_dsn(url)} is malformed: {scrub(str(exc), url)}",
            hint="write it as redis://[:PASSWORD@]HOST:PORT/DB or amqp://USER:PASSWORD@HOST:PORT/"
            "VHOST, percent-encoding special characters in the password",
            code=ErrorCode.BROKER_URL_INVALID,
        ) from None


def open_broker(url: str, info: AppInfo, options: Any) -> Source:
    # import cost: the drain's modules load when it runs (see cli/migrate.py's run_drain)
    from migrate.runner import open_source

    try:
        return open_source(url, info, options)
    except UjobsError:
        raise
    except Exception as exc:
        raise UjobsError(
            f"the broker {mask_dsn(url)} could not be opened: "
            f"{type(exc).__name__}: {scrub(str(exc), url)}",
            hint="check that the broker runs and that --broker (or the app's broker_url) is right",
            code=ErrorCode.BROKER_UNAVAILABLE,
        ) from None


def infrastructure_error(exc: Exception, broker: str) -> Exception:
    """What stopped a drain, labelled: the database or the broker failed (infrastructure: the
    batch in hand stays in the broker and is taken again by the next run), or anything else
    (a bug: raised as it is). A message never stops the drain: it is quarantined."""
    hint = (
        "nothing is lost: what this run took but did not commit is still in the broker "
        "(Redis: this drainer's processing lists; RabbitMQ: unacked, requeued); run migrate "
        "again once it is back"
    )
    text = f"{type(exc).__name__}: {mask_dsn(str(exc)).strip()}"
    if isinstance(exc, psycopg.Error):
        return DatabaseUnavailableError(
            f"the drain stopped: the database failed (infrastructure, not a message): {text}",
            hint=hint,
        )
    if _is_broker_error(exc):
        return UjobsError(
            f"the drain stopped: the broker {broker} failed (infrastructure, not a message): "
            + text,
            hint=hint,
            code=ErrorCode.BROKER_UNAVAILABLE,
        )
    return exc


def _is_broker_error(exc: Exception) -> bool:
    # import cost: redis's client loads only once a drain has failed
    import amqp
    import redis
    from kombu.exceptions import OperationalError

    return isinstance(
        exc, OSError | redis.RedisError | amqp.exceptions.AMQPError | OperationalError
    )
