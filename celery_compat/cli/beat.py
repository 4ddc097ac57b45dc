"""``ujobs-bridge beat convert -A proj [--json]``: what each Celery beat entry becomes.

Why it exists: before cutting ``celery beat`` over to ``ujobs-bridge scheduler -A proj``, an
operator needs to see, per ``beat_schedule`` entry, the cron (with Celery's day-of-month AND
day-of-week kept as ``day_or=false``) or interval it maps to, in which time zone, under which
catch-up policy, and for an entry that cannot map (``solar``), why. ``--strict`` exits 1 when
any entry cannot map, for CI. ``-A`` that holds no Celery app exits 2 with a hint. When the
app's ``beat_scheduler`` is django-celery-beat's, the enabled ``PeriodicTask`` rows of the app's
database (``--dsn``, else its ``ujobs_database_url``) are listed after the code's entries.

What it is not: the conversion (``celery_compat.beat.entries``, ``django_beat``) or the
scheduler; it reads the database only for django-celery-beat's rows.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click
from rich.table import Table

from celery_compat.cli.app_option import app_for_command
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.ext.cli import (
    CLI_ROLE,
    cell,
    console,
    database,
    dsn_option,
    json_option,
    print_json,
)
from ujobs_bridge.ext.database import connect


@click.group()
def beat() -> None:
    """Celery beat schedules on the ujobs-bridge scheduler."""


def _schedule_text(row: dict[str, Any]) -> str:
    if not row["ok"]:
        return "-"
    if row["kind"] == "cron":
        return f"{row['cron']} ({row['tz']})"
    if row["kind"] == "once":
        return str(row["engine_schedule"])
    return f"every {row['every_s']:g}s"


def _table_conversions(app: Any, dsn: str | None, quiet: bool) -> list[Any]:
    """django-celery-beat's rows, when the app's ``beat_scheduler`` is its scheduler."""
    # optional: the django-celery-beat reader, only for an app that uses its scheduler
    from celery_compat.beat.django_beat import convert_tables, wants_tables

    if not wants_tables(app):
        return []
    url = app.conf.get("ujobs_database_url")
    resolved = database(dsn, quiet=quiet, config_dsn=str(url) if url else None)
    with connect(resolved.dsn, CLI_ROLE) as conn:
        return convert_tables(app, conn)


@beat.command("convert")
@click.option("-A", "--app", "app_spec", required=True, metavar="MODULE[:ATTR]")
@click.option("--strict", is_flag=True, help="Exit 1 when any entry cannot map.")
@dsn_option
@json_option
def convert(app_spec: str, strict: bool, dsn: str | None, as_json: bool) -> None:
    """Each beat_schedule entry: its cron or interval, time zone, catch-up policy, day_or, or
    why it cannot map."""
    # import cost: beat's conversion (celery.beat) loads when `beat convert` runs,
    # not when `ujobs-bridge --help` lists beat
    from celery_compat.beat.entries import convert_app

    app = app_for_command(app_spec)
    now = datetime.now(UTC)
    try:
        rows = [c.as_dict(now) for c in convert_app(app)]
        rows += [c.as_dict(now) for c in _table_conversions(app, dsn, as_json)]
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    refused = [r for r in rows if not r["ok"]]
    if as_json:
        print_json(rows)
    else:
        table = Table(title=f"{len(rows)} beat entr{'y' if len(rows) == 1 else 'ies'}")
        for col in (
            "name",
            "task",
            "celery schedule",
            "engine",
            "day_or",
            "catch-up",
            "next / why",
        ):
            table.add_column(col, overflow="fold")
        for r in rows:
            day_or = "" if r["day_or"] is None else ("or" if r["day_or"] else "AND")
            last = r["next"] if r["ok"] else "cannot map (below)"
            table.add_row(
                cell(r["name"]),
                cell(str(r["task"] or "-")),
                cell(r["schedule"]),
                cell(_schedule_text(r)),
                cell(day_or),
                cell(str(r["catch_up"] or "-")),
                cell(str(last)),
            )
        console().print(table)
        for r in refused:
            click.echo(f"cannot map {r['name']!r}: {r['reason']}")
        notes: dict[str, list[str]] = {}
        for r in rows:
            for note in r["notes"]:
                notes.setdefault(note, []).append(r["name"])
        for note, names in notes.items():
            click.echo(f"note ({', '.join(names)}): {note}", err=True)
    if refused and strict:
        click.echo(
            f"error: {len(refused)} entr{'y' if len(refused) == 1 else 'ies'} cannot map", err=True
        )
        sys.exit(1)
