"""``ujobs-bridge db upgrade | grant | status | schema``: install, grant and inspect the schema.

Why it exists: the schema is versioned and forward-only; the schema owner upgrades it explicitly
in a deploy step and grants the application role what the runtime uses. Long-running commands
only check it (read-only), except on the embedded database or with ``UJOBS_AUTO_UPGRADE=1``. The
schema has parts (the engine's, then each installed package's: ``db/schema.py``); every command
here covers them all and names the part of each migration. Each takes ``-A`` as the other
commands do: the app's own database (its ``ujobs_database_url``) is the one it acts on, below
``--dsn`` and above ``$UJOBS_DATABASE_URL``, so the command a schema hint prints
(``db upgrade -A app``) upgrades the database that failed.

What it is not: the migration runner (``db/schema.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.table import Table

from ujobs_bridge._internal.cli.options import (
    APP,
    CLI_ROLE,
    app_database,
    dsn_option,
    json_option,
    print_json,
)
from ujobs_bridge._internal.cli.output import console
from ujobs_bridge._internal.db import connections, dump, schema

F = TypeVar("F", bound=Callable[..., Any])


@click.group()
def db() -> None:
    """Install, upgrade and inspect the database schema."""


@db.command()
@APP
@dsn_option
def upgrade(app_spec: str | None, dsn: str | None) -> None:
    """Apply every pending migration of every part (safe to run from several processes at once).
    With -A, on that app's database (its ujobs_database_url), the one its workers will use."""
    resolved = app_database(app_spec, dsn)
    taken = schema.upgrade_steps(resolved.dsn)
    for step in taken:
        m = step.migration
        if step.adopted is None:
            click.echo(f"{m.part}: applied {m.version:04d}_{m.name}")
        else:
            a = step.adopted
            click.echo(
                f"{m.part}: adopted {m.version:04d}_{m.name} "
                f"(already made by {a.from_part} {a.from_version:04d}_{a.from_name}; not run again)"
            )
    if not taken:
        click.echo("schema is up to date")


def _duty_option(duty: schema.Duty, does: str) -> Callable[[F], F]:
    return click.option(
        f"--{duty.value}",
        f"{duty.value}s",
        multiple=True,
        metavar="ROLE",
        help=f"Grant ROLE the {duty.value} duty: {does} (repeatable).",
    )


@db.command()
@click.argument("role", required=False)
@_duty_option(schema.Duty.PRODUCER, "enqueue and read a job by its id, no table access")
@_duty_option(schema.Duty.WORKER, "claim, settle, steps, heartbeats, presence, schedule, drain")
@_duty_option(schema.Duty.READER, "the read-only dashboard, /metrics and the CLI's reads")
@_duty_option(schema.Duty.OPERATOR, "a reader that may also requeue, cancel and discard")
@APP
@dsn_option
def grant(
    role: str | None,
    producers: tuple[str, ...],
    workers: tuple[str, ...],
    readers: tuple[str, ...],
    operators: tuple[str, ...],
    app_spec: str | None,
    dsn: str | None,
) -> None:
    """Give each ROLE exactly what its duties need, and nothing else (see docs/how-to/roles.md).
    A bare ROLE is an application role: producer and worker. Name every duty of a role in one
    command (a grant replaces what the role held); run as the schema owner after `db upgrade`,
    and again after an upgrade that adds tables. No duty may change the schema."""
    duties: dict[str, set[schema.Duty]] = {}
    if role is not None:
        duties.setdefault(role, set()).update(schema.APPLICATION)
    for duty, named in (
        (schema.Duty.PRODUCER, producers),
        (schema.Duty.WORKER, workers),
        (schema.Duty.READER, readers),
        (schema.Duty.OPERATOR, operators),
    ):
        for who in named:
            duties.setdefault(who, set()).add(duty)
    if not duties:
        raise click.UsageError("name a ROLE, or one of --producer/--worker/--reader/--operator")
    resolved = app_database(app_spec, dsn)
    for who, wanted in duties.items():
        granted = schema.grant(resolved.dsn, who, wanted)
        held = ", ".join(d.value for d in schema.Duty if d in granted.duties)
        click.echo(
            f"granted {who} ({held}): connect, schema usage, row privileges on "
            f"{len(granted.relations)} relations, {len(granted.functions)} functions"
        )


@db.command()
@APP
@dsn_option
@json_option
def status(app_spec: str | None, dsn: str | None, as_json: bool) -> None:
    """Show each part's applied and pending migrations."""
    resolved = app_database(app_spec, dsn, quiet=as_json)
    with connections.connect(resolved.dsn, CLI_ROLE) as conn:
        done = schema.applied(conn)
        pending = schema.pending_steps(conn)
    installed_sets = schema.sets()
    installed = [s.name for s in installed_sets]
    order = {name: index for index, name in enumerate(installed)}
    done.sort(key=lambda m: (order.get(m.part, len(order)), m.part, m.version))
    parts = {
        s.name: {
            "version": max((m.version for m in done if m.part == s.name), default=0),
            "latest": len(schema.migrations_of(s)),
            "pending": sum(1 for p in pending if p.migration.part == s.name),
        }
        for s in installed_sets
    }
    if as_json:
        print_json(
            {
                "database": resolved.masked,
                "parts": parts,
                "applied": [
                    {
                        "part": m.part,
                        "version": m.version,
                        "name": m.name,
                        "applied_at": m.applied_at,
                    }
                    for m in done
                ],
                "pending": [
                    {
                        "part": p.migration.part,
                        "version": p.migration.version,
                        "name": p.migration.name,
                        "adopts": None
                        if p.adopted is None
                        else f"{p.adopted.from_part} {p.adopted.from_version:04d}_{p.adopted.from_name}",
                    }
                    for p in pending
                ],
            }
        )
        return
    table = Table(title=f"schema of {resolved.masked}")
    table.add_column("part")
    table.add_column("version", justify="right")
    table.add_column("name")
    table.add_column("applied at")
    for m in done:
        part = m.part if m.part in order else f"{m.part} (not installed)"
        table.add_row(part, f"{m.version:04d}", m.name, m.applied_at.isoformat(timespec="seconds"))
    for p in pending:
        what = "pending" if p.adopted is None else "pending (adopts: already made)"
        table.add_row(
            p.migration.part,
            f"{p.migration.version:04d}",
            p.migration.name,
            f"[yellow]{what}[/yellow]",
        )
    console(markup=True).print(table)
    for name, at in parts.items():
        click.echo(f"{name}: at {at['version']:04d} of {at['latest']:04d}, {at['pending']} pending")
    if pending:
        click.echo(f"{len(pending)} pending: run `{resolved.upgrade_command}`")


@db.command("schema")
@click.option(
    "--part",
    "parts",
    multiple=True,
    help="Only this part (repeatable; default: every installed part).",
)
@click.option("--write", is_flag=True, help="Write each part's db/current_schema.sql.")
@click.option("--check", is_flag=True, help="Exit 1 if a part's file is not what it should be.")
@APP
@dsn_option
def schema_command(
    parts: tuple[str, ...], write: bool, check: bool, app_spec: str | None, dsn: str | None
) -> None:
    """Each part's current tables, indexes and functions as its migrations leave them (pg_dump
    of a scratch database this role creates on the --dsn server, then drops); with --write,
    regenerate the db/current_schema.sql files; with --check, compare them."""
    resolved = app_database(app_spec, dsn)
    generated = dump.generate(resolved.dsn, parts or None)
    stale = [p for p in generated if p.stale()]
    for p in generated:
        if write and p.stale():
            p.path.write_text(p.text, encoding="utf-8")
            click.echo(f"{p.part}: wrote {p.path}")
        elif write or check:
            click.echo(f"{p.part}: {p.path} {'is stale' if p.stale() else 'is current'}")
        else:
            click.echo(p.text)
    if check and stale:
        names = " ".join(f"--part {p.part}" for p in stale)
        raise click.ClickException(
            f"stale: {', '.join(str(p.path) for p in stale)}; "
            f"run `ujobs-bridge db schema --write {names}`"
        )
