"""``ujobs-bridge db upgrade | grant | status``: install, grant and inspect the schema.

Why it exists: the schema is versioned and forward-only; the schema owner upgrades it explicitly
in a deploy step and grants the application role what the runtime uses. Long-running commands
only check it (read-only), except on the embedded database or with ``UJOBS_AUTO_UPGRADE=1``.

What it is not: the migration runner (``db/schema.py``).
"""

from __future__ import annotations

import click
from rich.table import Table

from ujobs_bridge._internal.cli.options import (
    CLI_ROLE,
    database,
    dsn_option,
    json_option,
    print_json,
)
from ujobs_bridge._internal.cli.output import console
from ujobs_bridge._internal.db import connections, schema


@click.group()
def db() -> None:
    """Install, upgrade and inspect the database schema."""


@db.command()
@dsn_option
def upgrade(dsn: str | None) -> None:
    """Apply every pending migration (safe to run from several processes at once)."""
    resolved = database(dsn)
    ran = schema.upgrade(resolved.dsn)
    if ran:
        for m in ran:
            click.echo(f"applied {m.version:04d}_{m.name}")
    else:
        click.echo("schema is up to date")


@db.command()
@click.argument("role")
@dsn_option
def grant(role: str, dsn: str | None) -> None:
    """Give ROLE what the runtime needs (row privileges on the x_ tables; no DDL); run as the
    schema owner after `db upgrade`, and again after an upgrade that adds tables."""
    resolved = database(dsn)
    granted = schema.grant(resolved.dsn, role)
    click.echo(
        f"granted {role} connect, schema usage and row privileges on {len(granted)} relations"
    )


@db.command()
@dsn_option
@json_option
def status(dsn: str | None, as_json: bool) -> None:
    """Show applied and pending migrations."""
    resolved = database(dsn, quiet=as_json)
    with connections.connect(resolved.dsn, CLI_ROLE) as conn:
        done = schema.applied(conn)
    applied_versions = {m.version for m in done}
    pending = [m for m in schema.available() if m.version not in applied_versions]
    if as_json:
        print_json(
            {
                "database": resolved.masked,
                "applied": [
                    {"version": m.version, "name": m.name, "applied_at": m.applied_at} for m in done
                ],
                "pending": [{"version": m.version, "name": m.name} for m in pending],
            }
        )
        return
    table = Table(title=f"schema of {resolved.masked}")
    table.add_column("version", justify="right")
    table.add_column("name")
    table.add_column("applied at")
    for m in done:
        table.add_row(f"{m.version:04d}", m.name, m.applied_at.isoformat(timespec="seconds"))
    for p in pending:
        table.add_row(f"{p.version:04d}", p.name, "[yellow]pending[/yellow]")
    console(markup=True).print(table)
    if pending:
        click.echo(f"{len(pending)} pending: run `ujobs-bridge db upgrade`")
