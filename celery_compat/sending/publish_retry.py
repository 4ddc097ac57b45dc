"""Celery's publish retries for a send that writes into Postgres instead of a broker.

Why it exists: application code written for Celery relies on the publish policy. Celery (kombu's
``Connection.ensure``) retries a publish that met a lost or refused broker connection per
``retry``/``retry_policy`` on ``apply_async`` (or ``task_publish_retry``/
``task_publish_retry_policy`` in the configuration; Celery's defaults: retry, ``max_retries`` 3,
``interval_start`` 0, ``interval_step`` 0.2, ``interval_max`` 1), and then raises kombu's
``OperationalError``, which is what that code catches. Here the "broker" is the jobs database:
an attempt that finds it unreachable (refused, lost, shutting down or starting up) is retried
with the same pauses (``interval_start``, then ``interval_step`` more each time, never above
``interval_max``; ``errback(exc, interval)`` before each, as kombu calls it), and when the
policy is spent (or ``retry=False``) the send raises ``PublishError``: kombu's
``OperationalError`` and the project's ``UJ_DATABASE_UNAVAILABLE`` at once, with the driver's
error as its ``__cause__``.

A send inside the caller's transaction (``enqueue_in``, Django's ``atomic()``) is never retried:
the transaction is the caller's, and a lost connection has already lost it. It raises
``PublishError`` at once, saying so.

What it is not: a retry of errors of the statement itself (a payload, a constraint): those are
raised as they are, at once. Nor a guarantee against a duplicate when the connection is lost
after the server committed the row and before it answered (a broker publish has the same
window); a refused or lost connection before the statement runs sends nothing.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from kombu.exceptions import OperationalError
from psycopg_pool import PoolTimeout

from ujobs_bridge.errors import DatabaseUnavailableError, ErrorCode
from ujobs_bridge.ext.database import transient

log = logging.getLogger("celery_compat.publish")
T = TypeVar("T")

# Celery's task_publish_retry_policy defaults (celery.app.defaults), for a policy that names
# only some keys.
DEFAULT_POLICY: Mapping[str, Any] = {
    "max_retries": 3,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 1,
}


class PublishError(DatabaseUnavailableError, OperationalError):
    """A task could not be sent because the jobs database could not be reached. It is kombu's
    ``OperationalError`` (what Celery code catches around ``.delay()``) and the project's
    ``UJ_DATABASE_UNAVAILABLE``; ``__cause__`` is the driver's error."""

    code = ErrorCode.DATABASE_UNAVAILABLE


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``retry_policy`` as kombu reads it; ``max_retries`` None retries for ever."""

    max_retries: int | None = 3
    interval_start: float = 0.0
    interval_step: float = 0.2
    interval_max: float = 1.0
    errback: Callable[[BaseException, float], Any] | None = None

    @classmethod
    def of(
        cls, configured: Mapping[str, Any] | None, given: Mapping[str, Any] | None
    ) -> RetryPolicy:
        """Celery's merge: the call's ``retry_policy`` over the configured one over defaults."""
        merged = dict(DEFAULT_POLICY)
        merged.update(configured or {})
        merged.update(given or {})
        max_retries = merged.get("max_retries")
        return cls(
            max_retries=None if max_retries is None else int(max_retries),
            interval_start=float(merged.get("interval_start") or 0),
            interval_step=float(merged.get("interval_step") or 0),
            interval_max=float(merged.get("interval_max") or 0),
            errback=merged.get("errback"),
        )

    def intervals(self) -> Iterator[float]:
        """The pause before each retry: kombu's ``retry_over_time`` range (start, start+step, ...,
        each at most ``interval_max``; the last repeated)."""
        value = self.interval_start
        stop = self.interval_max + self.interval_start
        for _ in itertools.count():
            yield min(value, self.interval_max)
            if value + self.interval_step <= stop and self.interval_step > 0:
                value += self.interval_step

    def describe(self) -> str:
        tries = "unlimited" if self.max_retries is None else str(self.max_retries)
        return (
            f"max_retries={tries}, interval_start={self.interval_start:g}, "
            f"interval_step={self.interval_step:g}, interval_max={self.interval_max:g}"
        )


def unreachable(exc: BaseException) -> bool:
    """True if ``exc`` says the database could not be reached (retry the send), not that the
    statement was wrong."""
    if isinstance(exc, PoolTimeout | DatabaseUnavailableError):
        return True
    return isinstance(exc, psycopg.Error) and transient(exc)


def publish(
    attempt: Callable[[], T],
    *,
    retry: Callable[[], bool],
    policy: Callable[[], RetryPolicy],
    what: str,
    pause: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``attempt`` (one send) under Celery's publish policy; ``retry`` and ``policy`` are
    read only once an attempt found the database unreachable (a send that succeeds pays
    nothing for them); ``pause`` sleeps (injected by tests). Raises ``PublishError`` once the
    database stayed unreachable through the policy."""
    try:
        return attempt()
    except Exception as first:
        if not unreachable(first):
            raise
        failed: Exception = first
    if not retry():
        raise given_up(failed, what, 0, None) from failed
    rules = policy()
    intervals = rules.intervals()
    for retries in itertools.count():
        if rules.max_retries is not None and retries >= rules.max_retries:
            raise given_up(failed, what, retries, rules) from failed
        interval = next(intervals)
        log.warning(
            "%s: the jobs database is unreachable (%s); retry %d of %s in %gs",
            what,
            first_line(failed),
            retries + 1,
            "unlimited" if rules.max_retries is None else rules.max_retries,
            interval,
        )
        if rules.errback is not None:
            rules.errback(failed, interval)
        if interval:
            pause(interval)
        try:
            return attempt()
        except Exception as again:
            if not unreachable(again):
                raise
            failed = again
    raise AssertionError("unreachable")  # pragma: no cover - count() never ends


def given_up(
    exc: BaseException, what: str, retries: int, policy: RetryPolicy | None
) -> PublishError:
    if policy is None:
        tried = "once (retry=False)"
    else:
        tried = f"{retries + 1} time(s) (retry policy: {policy.describe()})"
    return PublishError(
        f"{what} was not sent: the jobs database could not be reached, tried {tried}: "
        f"{first_line(exc)}",
        hint=(
            "check that the database is up and reachable (ujobs-bridge health); a longer "
            "outage can be ridden out with task_publish_retry_policy or "
            "apply_async(retry_policy={...})"
        ),
    )


def in_transaction_lost(exc: BaseException, what: str) -> PublishError:
    """The caller's own transaction lost its connection: never retried (it is the caller's)."""
    return PublishError(
        f"{what} was not sent: the connection of the caller's transaction failed "
        f"({first_line(exc)}); a send inside the caller's transaction is not retried, "
        "since the transaction is the caller's and is lost with its connection",
        hint="roll the transaction back and run it again once the database is reachable",
    )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
