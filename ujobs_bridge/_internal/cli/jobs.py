"""``ujobs-bridge jobs ls | show | dead | stats`` (``cancel`` and ``requeue``: ``jobs_steer.py``).

Why it exists: an operator needs to see the backlog and read one job's story (attempts, last
error, lease, steps), found by its job id or the Celery task id in a worker's log, from a shell,
as tables for people (every value printed as text, never markup; one row per line in a pipe) or
``--json`` for scripts.

What it is not: the queries (``introspect.py``).
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ujobs_bridge._internal.cli import jobs_steer
from ujobs_bridge._internal.cli.options import (
    APP,
    app_database,
    checked_filters,
    dsn_option,
    json_option,
    print_json,
)
from ujobs_bridge._internal.cli.output import cell, console, table
from ujobs_bridge._internal.db.observe import AttemptRow
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.observe.introspect import (
    Introspector,
    attempt_text,
    parse_shown_state,
    step_json,
    suspended_reason,
)
from ujobs_bridge._internal.observe.redaction import redact, redact_message
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.records import JobRecord


def _introspector(app_spec: str | None, dsn: str | None, as_json: bool) -> Introspector:
    return Introspector(app_database(app_spec, dsn, quiet=as_json).dsn)


def _when(value: Any) -> str:
    return value.isoformat(timespec="seconds") if value is not None else ""


def _record_json(record: JobRecord, show_secrets: bool) -> dict[str, Any]:
    out = record.as_json()
    out["state"] = record.shown_state  # a package's failure kind (FAILURE) where it gave one
    if not show_secrets:
        out["input"] = redact(out["input"])
        out["output"] = redact(out["output"])
        out["last_error"] = _error(out.get("last_error"))
    return out


def _error(text: str | None) -> str | None:
    """An error's text (a traceback) as shown: its secrets hidden (``redaction.py``)."""
    return None if text is None else redact_message(text)


def _last_line(text: str | None, show_secrets: bool = False) -> str:
    lines = ((text if show_secrets else _error(text)) or "").strip().splitlines()
    return lines[-1] if lines else ""


def _table(records: list[JobRecord], title: str) -> Table:
    out = table(title, ("id", "name", "queue", "state", "attempt", "run at", "last error"))
    for r in records:
        out.add_row(
            cell(str(r.id)),
            cell(r.name),
            cell(r.queue),
            cell(r.shown_state),
            cell(attempt_text(r)),
            cell(_when(r.run_at)),
            cell(_last_line(r.last_error), 80),
        )
    return out


def _attempt_json(a: AttemptRow, show_secrets: bool = False) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "worker": a.worker,
        "claimed_at": a.claimed_at.isoformat() if a.claimed_at else None,
        "finished_at": a.finished_at.isoformat(),
        "outcome": a.outcome,
        "error": a.error if show_secrets else _error(a.error),
    }


def _attempts_table(attempts: list[AttemptRow], show_secrets: bool = False) -> Table:
    """Each attempt that ended: who ran it, when, how; its error's last line (the whole
    traceback is in ``--json`` and on the dashboard's job page)."""
    out = table(
        f"{len(attempts)} attempt(s)",
        ("#", "worker", "claimed", "finished", "outcome", "error"),
    )
    for a in attempts:
        out.add_row(
            cell(str(a.attempt)),
            cell(a.worker or "-"),
            cell(_when(a.claimed_at)),
            cell(_when(a.finished_at)),
            cell(a.outcome),
            cell(_last_line(a.error, show_secrets), 120),
        )
    return out


def _paging(limit: int, offset: int) -> None:
    try:
        validation.positive_int("--limit", limit, maximum=10_000)
        validation.offset("--offset", offset)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc


def _page_note(shown: int, limit: int, offset: int) -> str | None:
    if shown == limit:
        return f"more may follow: --offset {offset + limit}"
    return None


@click.group()
def jobs() -> None:
    """Inspect and steer jobs."""


@jobs.command("ls")
@click.option(
    "--state",
    default=None,
    help="ready, running, sleeping, waiting, done, dead (the dead letters), cancelled, or a"
    " failure kind in capitals (FAILURE: Celery tasks that failed).",
)
@click.option("--queue", default=None)
@click.option("--name", default=None, help="A job name or a glob: 'billing.*', '*.send_?'.")
@click.option("--task-id", default=None, help="The jobs of this Celery task id.")
@click.option("--limit", default=50, show_default=True, type=int)
@click.option("--offset", default=0, show_default=True, type=int, help="Skip this many (paging).")
@APP
@dsn_option
@json_option
def ls(
    state: str | None,
    queue: str | None,
    name: str | None,
    task_id: str | None,
    limit: int,
    offset: int,
    app_spec: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first."""
    checked_filters(name=name, task_id=task_id)
    try:
        parsed, kind = parse_shown_state(state)
        if queue is not None:
            validation.queue_name(queue)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    _paging(limit, offset)
    records = _introspector(app_spec, dsn, as_json).jobs(
        state=parsed,
        kind=kind,
        queue=queue,
        name=name,
        task_id=task_id,
        limit=limit,
        offset=offset,
    )
    if as_json:
        print_json([_record_json(r, False) for r in records])
        return
    out = console()
    out.print(_table(records, f"{len(records)} job(s)"))
    note = _page_note(len(records), limit, offset)
    if note:
        click.echo(note, err=True)


@jobs.command()
@click.argument("job_id", metavar="ID")
@click.option(
    "--show-secrets",
    "--show-input",
    "show_input",
    is_flag=True,
    help="Print inputs, outputs and errors as stored, without hiding what looks secret "
    "(passwords in URLs, secret-named keys).",
)
@APP
@dsn_option
@json_option
def show(
    job_id: str, show_input: bool, app_spec: str | None, dsn: str | None, as_json: bool
) -> None:
    """Show one job (ID: a job id, or a Celery task id: its newest message's job): state,
    attempts, lease, input, output, last error, and its steps."""
    introspector = _introspector(app_spec, dsn, as_json)
    found = introspector.find(job_id)
    record = found[0]
    if len(found) > 1 and not as_json:
        others = ", ".join(str(r.id) for r in found[1:])
        click.echo(
            f"task {job_id} has {len(found)} jobs (one per message); newest shown, others: {others}",
            err=True,
        )
    steps = introspector.steps(record.id)
    attempts = introspector.attempts(record.id)
    data = _record_json(record, show_input)
    reason = suspended_reason(record, steps)
    if as_json:
        data["suspended"] = reason
        data["steps"] = [step_json(s, show_input) for s in steps]
        data["attempts"] = [_attempt_json(a, show_input) for a in attempts]
        print_json(data)
        return
    fields = Table(title=Text(f"job {record.id}"), show_header=False)
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    for key, value in data.items():
        if key in ("id",):
            continue
        fields.add_row(cell(key), cell(value, 4000))
    if reason:
        fields.add_row(cell("suspended"), cell(reason))
    out = console()
    out.print(fields)
    if attempts:
        out.print(_attempts_table(attempts, show_input))
    if steps:
        step_table = table(
            f"{len(steps)} step(s)",
            ("#", "name", "status", "attempts", "started", "took", "output / error"),
        )
        for s in steps:
            took = ""
            if s.completed_at is not None:
                took = f"{(s.completed_at - s.started_at).total_seconds() * 1000:.1f} ms"
            shown = (
                _last_line(s.error, show_input)
                if s.error
                else redact(s.output)
                if not show_input
                else s.output
            )
            if s.status in ("sleeping", "waiting") and s.wake_at is not None:
                shown = f"until {_when(s.wake_at)}"
            step_table.add_row(
                cell(str(s.ordinal + 1)),
                cell(s.name),
                cell(s.status),
                cell(str(s.attempts)),
                cell(_when(s.started_at)),
                cell(took),
                cell(shown, 200),
            )
        out.print(step_table)


jobs.add_command(jobs_steer.cancel)
jobs.add_command(jobs_steer.requeue)


@jobs.command()
@click.option("--queue", default=None)
@click.option("--name", default=None, help="A job name or a glob.")
@click.option("--limit", default=50, show_default=True, type=int)
@click.option("--offset", default=0, show_default=True, type=int, help="Skip this many (paging).")
@APP
@dsn_option
@json_option
def dead(
    queue: str | None,
    name: str | None,
    limit: int,
    offset: int,
    app_spec: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """List dead letters, most recent first (a Celery task's FAILURE is not one: `jobs ls
    --state FAILURE` lists those)."""
    checked_filters(name=name)
    try:
        if queue is not None:
            validation.queue_name(queue)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    _paging(limit, offset)
    records = _introspector(app_spec, dsn, as_json).dead(
        limit=limit, offset=offset, queue=queue, name=name
    )
    if as_json:
        print_json([_record_json(r, False) for r in records])
        return
    console().print(_table(records, f"{len(records)} dead letter(s)"))
    note = _page_note(len(records), limit, offset)
    if note:
        click.echo(note, err=True)


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
        validation.lookback("--stranded-after", after)
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
                    "state": r.shown_state,
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
    by_state = table("jobs by queue and state", ("queue", "state", "jobs", "oldest run at"))
    for r in rows:
        by_state.add_row(
            cell(r.queue), cell(r.shown_state), cell(str(r.jobs)), cell(_when(r.oldest_run_at))
        )
    out = console()
    out.print(by_state)
    if not stranded:
        return
    waiting = table(
        f"due for at least {after:g}s and not claimed, by name",
        ("queue", "state", "name", "jobs", "oldest run at"),
    )
    for s in stranded:
        waiting.add_row(
            cell(s.queue),
            cell(s.state.value),
            cell(s.name),
            cell(str(s.jobs)),
            cell(_when(s.oldest_run_at)),
        )
    out.print(waiting)
    out.print(
        "No worker has claimed these: either none runs on the queue, they are behind a backlog, "
        "or no running worker declares the name (its worker logs 'Received unregistered task'). "
        "Deploy a worker that declares it, or `ujobs-bridge jobs cancel` them."
    )
