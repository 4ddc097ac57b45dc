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
from collections.abc import Iterator
from contextlib import contextmanager

import click
import psycopg

from ujobs_bridge._internal.observe.redaction import redact_message
from ujobs_bridge.errors import DatabaseUnavailableError, SchemaError, UjobsError


def explain(exc: BaseException) -> UjobsError | None:
    """The error to print for ``exc``, or None when it is not one the operator can fix."""
    if isinstance(exc, UjobsError):
        return exc
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return SchemaError(
            f"the database has no ujobs-bridge schema, or an old one ({exc.diag.message_primary})",
            hint="run `ujobs-bridge db upgrade` against it",
        )
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseUnavailableError(
            f"the database could not be reached: {redact_message(str(exc)).strip()}",
            hint="check that Postgres is running and the DSN (--dsn / UJOBS_DATABASE_URL) is right",
        )
    return None


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Inside: an error the operator can fix is printed as ``error: [UJ_...] ...`` (and its
    hint) on stderr and ends the process with exit code 1."""
    try:
        yield
    except (UjobsError, psycopg.Error) as exc:
        error = explain(exc)
        if error is None:
            raise
        click.echo(f"error: {error.render()}", err=True)  # (masked where it was raised)
        sys.exit(1)
