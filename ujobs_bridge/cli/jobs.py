"""``ujobs-bridge jobs ls | show | cancel | requeue | dead | stats``.

Why it exists: an operator needs to see the backlog, read one job's story (attempts, last error,
lease), stop a job (a running body is signalled at once) and give a dead letter another go,
from a shell, as tables for people or ``--json`` for scripts.

What it is not: the queries (``introspect.py``).
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import validation
from ..errors import ConfigError
from ..introspect import Introspector, parse_id, parse_state, redact, step_json, suspended_reason
from ..records import JobRecord
from .options import app_database, app_option, dsn_option, json_option, print_json


def _introspector(app_spec: str | None, dsn: str | None, as_json: bool) -> Introspector:
    return Introspector(app_database(app_spec, dsn, quiet=as_json).dsn)


def _short(value: Any, limit: int = 60) -> str:
    text = (
        json.dumps(value, default=str, ensure_ascii=False) if not isinstance(value, str) else value
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(value: Any) -> str:
    return value.isoformat(timespec="seconds") if value is not None else ""


def _record_json(record: JobRecord, show_input: bool) -> dict[str, Any]:
    out = record.as_json()
    if not show_input:
        out["input"] = redact(out["input"])
        out["output"] = redact(out["output"])
    return out


def _table(records: list[JobRecord], title: str) -> Table:
    table = Table(title=title)
    for col in ("id", "name", "queue", "state", "attempt", "run at", "last error"):
        table.add_column(col, overflow="fold")
    for r in records:
        error = (r.last_error or "").strip().splitlines()
        table.add_row(
            str(r.id),
            r.name,
            r.queue,
            r.state.value,
            f"{r.attempt}/{r.max_attempts}",
            _when(r.run_at),
            _short(error[-1] if error else "", 50),
        )
    return table


APP = app_option("Use this app's database (its ujobs_database_url); --dsn wins.")


@click.group()
def jobs() -> None:
    """Inspect and steer jobs."""


@jobs.command("ls")
@click.option(
    "--state", default=None, help="ready, running, sleeping, waiting, done, dead or cancelled."
)
@click.option("--queue", default=None)
@click.option("--name", default=None)
@click.option("--limit", default=50, show_default=True, type=int)
@APP
@dsn_option
@json_option
def ls(
    state: str | None,
    queue: str | None,
    name: str | None,
    limit: int,
    app_spec: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first."""
    try:
        parsed = parse_state(state)
        if queue is not None:
            validation.queue_name(queue)
        validation.positive_int("--limit", limit, maximum=10_000)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    records = _introspector(app_spec, dsn, as_json).jobs(
        state=parsed, queue=queue, name=name, limit=limit
    )
    if as_json:
        print_json([_record_json(r, False) for r in records])
    else:
        Console().print(_table(records, f"{len(records)} job(s)"))


@jobs.command()
@click.argument("job_id")
@click.option(
    "--show-input",
    is_flag=True,
    help="Print inputs and outputs without redacting secret-looking keys.",
)
@APP
@dsn_option
@json_option
def show(
    job_id: str, show_input: bool, app_spec: str | None, dsn: str | None, as_json: bool
) -> None:
    """Show one job: state, attempts, lease, input, output, last error, and its steps."""
    introspector = _introspector(app_spec, dsn, as_json)
    record = introspector.get(parse_id(job_id))
    steps = introspector.steps(record.id)
    data = _record_json(record, show_input)
    reason = suspended_reason(record, steps)
    if as_json:
        data["suspended"] = reason
        data["steps"] = [step_json(s, show_input) for s in steps]
        print_json(data)
        return
    table = Table(title=f"job {record.id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        if key in ("id",):
            continue
        table.add_row(key, "" if value is None else _short(value, 2000))
    if reason:
        table.add_row("suspended", reason)
    console = Console()
    console.print(table)
    if steps:
        step_table = Table(title=f"{len(steps)} step(s)")
        for col in ("#", "name", "status", "attempts", "started", "took", "output / error"):
            step_table.add_column(col, overflow="fold")
        for s in steps:
            took = ""
            if s.completed_at is not None:
                took = f"{(s.completed_at - s.started_at).total_seconds() * 1000:.1f} ms"
            shown = (
                s.error.strip().splitlines()[-1]
                if s.error
                else redact(s.output)
                if not show_input
                else s.output
            )
            if s.status in ("sleeping", "waiting") and s.wake_at is not None:
                shown = f"until {_when(s.wake_at)}"
            step_table.add_row(
                str(s.ordinal + 1),
                s.name,
                s.status,
                str(s.attempts),
                _when(s.started_at),
                took,
                _short(shown, 60),
            )
        console.print(step_table)


@jobs.command()
@click.argument("job_id")
@APP
@dsn_option
@json_option
def cancel(job_id: str, app_spec: str | None, dsn: str | None, as_json: bool) -> None:
    """Cancel a live job; a running body is signalled at once."""
    record = _introspector(app_spec, dsn, as_json).cancel(parse_id(job_id))
    if as_json:
        print_json(_record_json(record, False))
    else:
        click.echo(f"cancelled {record.id} ({record.name})")


@jobs.command()
@click.argument("job_id")
@APP
@dsn_option
@json_option
def requeue(job_id: str, app_spec: str | None, dsn: str | None, as_json: bool) -> None:
    """Give a dead or cancelled job a fresh set of attempts, due now."""
    record = _introspector(app_spec, dsn, as_json).requeue(parse_id(job_id))
    if as_json:
        print_json(_record_json(record, False))
    else:
        click.echo(f"requeued {record.id} ({record.name})")


@jobs.command()
@click.option("--limit", default=50, show_default=True, type=int)
@APP
@dsn_option
@json_option
def dead(limit: int, app_spec: str | None, dsn: str | None, as_json: bool) -> None:
    """List dead letters, most recent first."""
    records = _introspector(app_spec, dsn, as_json).dead(limit=limit)
    if as_json:
        print_json([_record_json(r, False) for r in records])
    else:
        Console().print(_table(records, f"{len(records)} dead letter(s)"))


@jobs.command()
@click.option(
    "--stranded-after",
    "stranded_after",
    default=60.0,
    show_default=True,
    type=float,
    help="Also list, by name, claimable jobs due for at least this many seconds and not claimed.",
)
@APP
@dsn_option
@json_option
def stats(stranded_after: float, app_spec: str | None, dsn: str | None, as_json: bool) -> None:
    """Jobs per queue and state, and the names of jobs due longer than --stranded-after and not
    claimed (a name no running worker declares waits until one that does starts)."""
    try:
        after = validation.seconds("--stranded-after", stranded_after, allow_zero=True)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    introspector = _introspector(app_spec, dsn, as_json)
    rows = introspector.stats()
    stranded = introspector.stranded(after_s=after)
    if as_json:
        print_json(
            [
                {
                    "queue": r.queue,
                    "state": r.state.value,
                    "jobs": r.jobs,
                    "oldest_run_at": r.oldest_run_at,
                    "stranded_after_s": after,
                    "stranded": [
                        {
                            "name": s.name,
                            "jobs": s.jobs,
                            "oldest_run_at": s.oldest_run_at,
                            "oldest_due_s": round(s.oldest_s, 3),
                        }
                        for s in stranded
                        if (s.queue, s.state) == (r.queue, r.state)
                    ],
                }
                for r in rows
            ]
        )
        return
    table = Table(title="jobs by queue and state")
    for col in ("queue", "state", "jobs", "oldest run at"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.queue, r.state.value, str(r.jobs), _when(r.oldest_run_at))
    console = Console()
    console.print(table)
    if not stranded:
        return
    waiting = Table(title=f"due for at least {after:g}s and not claimed, by name")
    for col in ("queue", "state", "name", "jobs", "oldest run at"):
        waiting.add_column(col)
    for s in stranded:
        waiting.add_row(s.queue, s.state.value, s.name, str(s.jobs), _when(s.oldest_run_at))
    console.print(waiting)
    console.print(
        "No worker has claimed these: either none runs on the queue, they are behind a backlog, "
        "or no running worker declares the name (its worker logs 'Received unregistered task'). "
        "Deploy a worker that declares it, or `ujobs-bridge jobs cancel` them."
    )
