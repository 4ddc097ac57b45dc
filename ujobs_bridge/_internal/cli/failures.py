"""How a command that failed on purpose tells the operator: one line with the error's code and
its hint, the DSN masked, exit 1; never a traceback.

Why it exists: ``ujobs-bridge COMMAND`` and the commands that stand in for Celery's own
(``celery -A proj worker`` on a celery_compat app) must fail the same way for the same cause: a
malformed DSN, an unreachable database, a schema to upgrade. Both wrap their work in
``one_line_errors``.

What it is not: a catch-all. An exception the library did not raise on purpose (a bug) keeps its
traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import psycopg

from ujobs_bridge._internal.observe import logs
from ujobs_bridge._internal.observe.redaction import redact_message
from ujobs_bridge.errors import DatabaseUnavailableError, SchemaError, UjobsError


def explain(exc: BaseException, upgrade_command: str | None = None) -> UjobsError | None:
    """The error to print for ``exc``, or None when it is not one the operator can fix;
    ``upgrade_command`` is the command that upgrades the database that failed, when known."""
    if isinstance(exc, UjobsError):
        return exc
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return SchemaError(
            f"the database has no ujobs-bridge schema, or an old one ({exc.diag.message_primary})",
            hint=f"run `{upgrade_command or 'ujobs-bridge db upgrade --dsn <this database>'}`",
        )
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseUnavailableError(
            f"the database could not be reached: {redact_message(str(exc)).strip()}",
            hint="check that Postgres is running and the DSN (--dsn / UJOBS_DATABASE_URL) is right",
        )
    return None


@contextmanager
def one_line_errors(upgrade_command: Callable[[], str | None] | None = None) -> Iterator[None]:
    """Inside: an error the operator can fix is printed as ``error: [UJ_...] ...`` (and its
    hint) on stderr and ends the process with exit code 1. ``upgrade_command`` names the command
    a schema hint prints (the database the command resolved)."""
    try:
        yield
    except (UjobsError, psycopg.Error) as exc:
        error = explain(exc, upgrade_command() if upgrade_command is not None else None)
        if error is None:
            raise
        fail(error.render())  # (masked where it was raised)


def fail(text: str) -> NoReturn:
    """``error: ...`` on stderr (one JSON object under ``--log-format json``), exit 1."""
    logs.say(f"error: {text}", level="ERROR")
    sys.exit(1)
