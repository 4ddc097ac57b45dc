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

# Each command's module is imported only when that command runs (or --help lists them): a
# `worker` never pays for the demo's or migrate's imports, and a broken optional command cannot
# stop the others from starting. Static imports, so no module is ever named by data.
COMMANDS = (
    "db", "worker", "jobs", "demo", "events", "purge", "outbox", "scheduler", "tasks", "migrate",
    "beat",
)  # fmt: skip


def _load(name: str) -> click.Command | None:
    if name == "db":
        from .db import db

        return db
    if name == "worker":
        from .worker import worker

        return worker
    if name == "jobs":
        from .jobs import jobs

        return jobs
    if name == "demo":
        from .demo import demo

        return demo
    if name == "events":
        from .events import events

        return events
    if name == "purge":
        from .purge import purge

        return purge
    if name == "outbox":
        from .outbox import outbox

        return outbox
    if name in ("scheduler", "tasks"):
        from .scheduler import scheduler, tasks

        return scheduler if name == "scheduler" else tasks
    if name == "migrate":
        from .migrate import migrate

        return migrate
    if name == "beat":
        from .beat import beat

        return beat
    return None


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return _load(cmd_name)

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


def main() -> None:
    cli()
