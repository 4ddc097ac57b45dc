"""The ``ujobs-bridge`` command line: one click group, one module per command family.

Why it exists: operators and CI scripts drive the engine from a shell. Exit codes are a contract
(0 ok, 1 failure, 2 usage); every read command takes ``--json``; every error the library raises
on purpose prints its code, message and hint, and no DSN is printed with its password.

What it is not: business logic. Commands parse flags, call the engine and print.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import psycopg

from ..dsn import mask_dsn
from ..errors import DatabaseUnavailableError, SchemaError, UjobsError
from .beat import beat
from .db import db
from .demo import demo
from .events import events
from .jobs import jobs
from .migrate import migrate
from .outbox import outbox
from .purge import purge
from .scheduler import scheduler, tasks
from .worker import worker


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UjobsError as exc:
            click.echo(f"error: {exc.render()}", err=True)
            sys.exit(1)
        except psycopg.errors.UndefinedTable as exc:
            schema_error = SchemaError(
                f"the database has no ujobs-bridge schema, or an old one ({exc.diag.message_primary})",
                hint="run `ujobs-bridge db upgrade` against it",
            )
            click.echo(f"error: {schema_error.render()}", err=True)
            sys.exit(1)
        except psycopg.OperationalError as exc:
            error = DatabaseUnavailableError(
                f"the database could not be reached: {mask_dsn(str(exc)).strip()}",
                hint="check that Postgres is running and the DSN (--dsn / UJOBS_DATABASE_URL) is right",
            )
            click.echo(f"error: {error.render()}", err=True)
            sys.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ujobs-bridge")
def cli() -> None:
    """Durable jobs in Postgres, and the road off Celery."""


cli.add_command(db)
cli.add_command(worker)
cli.add_command(jobs)
cli.add_command(demo)
cli.add_command(events)
cli.add_command(purge)
cli.add_command(outbox)
cli.add_command(scheduler)
cli.add_command(tasks)
cli.add_command(migrate)
cli.add_command(beat)


def main() -> None:
    cli()
