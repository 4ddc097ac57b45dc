"""``ujobs-bridge migrate quarantine ls | show ID | retry ID | discard ID``.

Why it exists: a message the drainer could not move is kept with its bytes and a reason; the
operator needs to see those, read one (its bytes shown escaped, never decoded by anything that
could run code), try it again once the cause is fixed (the task deployed in ``-A``, a serializer
accepted), or give it up. Retry and discard mark the entry; nothing is deleted.

What it is not: the quarantine store (``migrate/quarantine.py``) or the decoder.
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from migrate import redacted
from migrate.appinfo import AppInfo
from migrate.cli.accept import accept_from, load_app
from migrate.defaults import DEFAULT_MAX_BYTES, PICKLE_WARNING
from ujobs_bridge.ext import database as connections
from ujobs_bridge.ext.cli import (
    CLI_ROLE,
    app_database,
    app_option,
    cell,
    checked_filters,
    console,
    dsn_option,
    json_option,
    print_json,
)
from ujobs_bridge.ext.observe import redact_text


def _conn(app_spec: str | None, dsn: str | None, as_json: bool) -> connections.Conn:
    return connections.connect(app_database(app_spec, dsn, quiet=as_json).dsn, CLI_ROLE)


APP = app_option("Use this Celery app's database (its ujobs_database_url); --dsn wins.")


@click.group()
def quarantine() -> None:
    """Messages the drainer could not move: list, read, retry, discard."""


@quarantine.command("ls")
@click.option(
    "--all", "include_resolved", is_flag=True, help="Include retried and discarded entries."
)
@click.option("--reason", default=None, help="Only this reason (e.g. unknown_task).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@APP
@dsn_option
@json_option
def ls(
    include_resolved: bool,
    reason: str | None,
    limit: int,
    app_spec: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """List quarantined messages, oldest first."""
    checked_filters(reason=reason)
    # import cost: the quarantine store loads when a quarantine command runs, not at --help
    from migrate import quarantine as store

    with _conn(app_spec, dsn, as_json) as conn:
        found = store.entries(conn, include_resolved=include_resolved, reason=reason, limit=limit)
        counts = store.open_counts(conn)
    if as_json:
        listed = [e.as_json() | {"detail": redact_text(e.detail)} for e in found]
        print_json({"entries": listed, "open_by_reason": counts})
        return
    table = Table(title=Text(f"{len(found)} quarantined message(s)"))
    for col in (
        "id",
        "queue",
        "reason",
        "task",
        "task id",
        "size",
        "seen",
        "created",
        "resolution",
    ):
        table.add_column(col, overflow="fold")
    for e in found:
        table.add_row(
            cell(str(e.id)),
            cell(e.queue),
            cell(e.reason),
            cell(e.task),
            cell(e.task_id),
            cell(f"{e.size:,}"),
            cell(str(e.seen)),
            cell(e.created_at.isoformat(timespec="seconds")),
            cell(e.resolution),
        )
    out = console()
    out.print(table)
    if counts:
        out.print("open: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


@quarantine.command()
@click.argument("entry_id", type=int)
@click.option(
    "--raw",
    "dump_raw",
    is_flag=True,
    help="Write the raw bytes to stdout as stored (secrets NOT hidden), nothing else.",
)
@APP
@dsn_option
@json_option
def show(
    entry_id: int, dump_raw: bool, app_spec: str | None, dsn: str | None, as_json: bool
) -> None:
    """Show one entry: reason, detail, metadata, and its bytes (escaped, first 4 KiB), with
    secret-looking values hidden (``--raw``: the bytes exactly as stored)."""
    # import cost: the quarantine store loads when a quarantine command runs (see retry)
    from migrate import quarantine as store

    with _conn(app_spec, dsn, as_json or dump_raw) as conn:
        stored = store.get(conn, entry_id)
    if stored is None:
        raise click.ClickException(f"no quarantine entry {entry_id}")
    if dump_raw:
        sys.stdout.buffer.write(stored.raw)
        return

    # secret-looking values hidden, as the dashboard hides job arguments (--raw: as stored)
    preview = redacted.raw_bytes(stored.raw)[:4096].decode("utf-8", "backslashreplace")
    data = {
        **stored.entry.as_json(),
        "sha256": stored.sha256,
        "meta": redacted.meta(stored.meta),
        "raw_preview": preview,
    }
    if stored.entry.detail:
        data["detail"] = redact_text(stored.entry.detail)
    if as_json:
        print_json(data)
        return
    table = Table(title=f"quarantine entry {entry_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        table.add_row(key, cell(value))
    console().print(table)


@quarantine.command()
@click.argument("entry_id", type=int)
@click.option(
    "-A",
    "--app",
    "app_spec",
    required=True,
    metavar="MODULE[:ATTR]",
    help="The Celery app that now knows the task.",
)
@click.option("--accept-content", default=None, metavar="json,msgpack,yaml")
@click.option(
    "--accept-pickle",
    is_flag=True,
    help="Unpickle this message (trusts its bytes with code execution).",
)
@click.option(
    "--max-bytes", default=DEFAULT_MAX_BYTES, show_default=True, type=click.IntRange(min=1024)
)
@dsn_option
@json_option
def retry(
    entry_id: int,
    app_spec: str,
    accept_content: str | None,
    accept_pickle: bool,
    max_bytes: int,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Decode the message again; if it now makes a job, insert it and mark the entry retried."""
    # import cost: the quarantine store and the batch (its database statements) load when
    # a quarantine command runs, not when `ujobs-bridge --help` lists migrate
    from migrate import quarantine as store
    from migrate.batch import Context, retry_entry

    info = AppInfo.from_app(load_app(app_spec))
    if accept_pickle:
        Console(stderr=True).print(f"[bold red]{PICKLE_WARNING}")
    accept = accept_from(info, accept_content, accept_pickle, max_bytes)
    with _conn(app_spec, dsn, as_json) as conn:
        stored = store.get(conn, entry_id)
        if stored is None:
            raise click.ClickException(f"no quarantine entry {entry_id}")
        outcome = retry_entry(
            conn, entry_id, Context(info, accept, stored.entry.broker, stored.entry.format)
        )
    if outcome is None:
        raise click.ClickException(f"quarantine entry {entry_id} is already resolved")
    if as_json:
        print_json(
            {
                "id": entry_id,
                "ok": outcome.ok,
                "job_id": str(outcome.job_id) if outcome.job_id else None,
                "duplicate": outcome.duplicate,
                "reason": outcome.poison.reason if outcome.poison else None,
                "detail": redact_text(outcome.poison.detail) if outcome.poison else None,
            }
        )
    elif outcome.ok:
        click.echo(
            f"retried {entry_id}: "
            + (
                "already a job (duplicate absorbed)"
                if outcome.duplicate
                else f"job {outcome.job_id}"
            )
        )
    else:
        assert outcome.poison is not None
        click.echo(
            f"still quarantined {entry_id}: {outcome.poison.reason}: "
            f"{redact_text(outcome.poison.detail)}"
        )
    if not outcome.ok:
        sys.exit(1)


@quarantine.command()
@click.argument("entry_id", type=int)
@APP
@dsn_option
@json_option
def discard(entry_id: int, app_spec: str | None, dsn: str | None, as_json: bool) -> None:
    """Give the message up: the entry stays, marked discarded."""
    # import cost: the quarantine store loads when a quarantine command runs (see retry)
    from migrate import quarantine as store

    with _conn(app_spec, dsn, as_json) as conn:
        if store.get(conn, entry_id) is None:
            raise click.ClickException(f"no quarantine entry {entry_id}")
        done = store.resolve(conn, entry_id, "discarded")
    if not done:
        raise click.ClickException(f"quarantine entry {entry_id} is already resolved")
    if as_json:
        print_json({"id": entry_id, "resolution": "discarded"})
    else:
        click.echo(f"discarded {entry_id}")
