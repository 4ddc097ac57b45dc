"""``ujobs-bridge demo``: the whole story in one command, on the embedded default or ``--dsn``.

Why it exists: the first run should show, in under a minute and with nothing else installed,
what the engine promises. It upgrades the schema, starts an in-process ``Worker`` on a queue unique
to this run (``demo-<hex>``, so reruns never mix), enqueues a few thousand jobs in batches with
``client.enqueue_many``, some of which fail on their first attempt(s) and succeed on retry and
exactly one of which always fails and dead-letters, shows a progress bar, then reads the outcome
back FROM THE DATABASE: states, attempts, the dead letter and its last error, elapsed time and
throughput on the database clock. Nothing in the summary is a number the demo merely believes.
Then (unless ``--no-celery``) it runs a Celery-style app through the bridge: a chain, a group, a
task that retries once and a beat entry (``celery_demo.py``, app in ``demo_celery.py``); and it
moves a backlog real Celery published to a serverless kombu broker onto the bridge and runs it
(``migrate_demo.py``).

What it is not: a benchmark (``python -m bench``) or a test. The jobs are in ``demo_jobs.py``.
"""

from __future__ import annotations

import os
import secrets
import shlex
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from .. import demo_jobs, registry, validation
from ..client import Client
from ..drivers.postgres import schema
from ..dsn import ResolvedDatabase
from ..embedded import ENV_HOME
from ..errors import ConfigError
from ..introspect import Introspector
from ..job import EnqueueRequest
from ..records import LIVE_STATES, JobRecord, JobState
from ..worker import Worker
from ..worker_config import WorkerConfig
from . import celery_demo, migrate_demo
from .options import database, dsn_option, json_option, print_json

DEFAULT_JOBS = 3000
MAX_JOBS = 100_000
BATCH = 500
DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Plan:
    """What the demo enqueues, decided before anything runs (so the outcome can be checked)."""

    requests: list[EnqueueRequest]
    fail_attempts: list[int]  # planned failures per process_order job
    dead_max_attempts: int

    @property
    def planned_retries(self) -> int:
        return sum(self.fail_attempts) + self.dead_max_attempts - 1


def _plan(total: int, queue: str) -> Plan:
    """``total - 1`` orders (about 10% fail once, 2% twice) and one card charge that never works,
    placed in the middle of the stream."""
    orders = demo_jobs.process_order.configure(queue=queue)
    charges = demo_jobs.charge_card.configure(queue=queue)
    requests: list[EnqueueRequest] = []
    fails: list[int] = []
    dead_at = total // 2
    for i in range(total - 1):
        if i == dead_at:
            requests.append(charges.call(order_id=900_000 + i, card_last4="0119"))
        fail = 2 if i % 50 == 7 else 1 if i % 10 == 3 else 0
        fails.append(fail)
        requests.append(orders.call(order_id=100_000 + i, fail_attempts=fail))
    if dead_at >= total - 1:  # total == 2: the charge goes last
        requests.append(charges.call(order_id=900_000 + dead_at, card_last4="0119"))
    return Plan(requests, fails, demo_jobs.charge_card.retry.max_attempts)


@dataclass(frozen=True, slots=True)
class Summary:
    queue: str
    states: dict[str, int]
    attempts: dict[int, int]
    retries_observed: int
    jobs_retried: int
    dead: list[JobRecord]
    enqueue_s: float
    elapsed_s: float

    @property
    def jobs(self) -> int:
        return sum(self.states.values())

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _summarise(queue: str, records: list[JobRecord]) -> Summary:
    """Every figure from the rows: states, attempt counts, timestamps on the database clock."""
    states = Counter(r.state.value for r in records)
    attempts = Counter(r.attempt for r in records)
    created = [r.created_at for r in records]
    finished = [r.finished_at for r in records if r.finished_at is not None]
    enqueue_s = (max(created) - min(created)).total_seconds() if created else 0.0
    elapsed_s = (max(finished) - min(created)).total_seconds() if finished and created else 0.0
    return Summary(
        queue=queue,
        states=dict(sorted(states.items())),
        attempts=dict(sorted(attempts.items())),
        retries_observed=sum(max(0, r.attempt - 1) for r in records),
        jobs_retried=sum(1 for r in records if r.attempt > 1),
        dead=[r for r in records if r.state is JobState.DEAD],
        enqueue_s=enqueue_s,
        elapsed_s=elapsed_s,
    )


def _last_line(text: str | None) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _next_commands(resolved: ResolvedDatabase, queue: str, dead_id: str | None) -> list[str]:
    prefix = "ujobs-bridge"
    home = os.environ.get(ENV_HOME)
    if resolved.source == "embedded" and home:
        prefix = f"{ENV_HOME}={shlex.quote(home)} {prefix}"
    suffix = f" --dsn {shlex.quote(resolved.masked)}" if resolved.source == "flag" else ""
    commands = [f"{prefix} jobs ls --queue {queue}{suffix}"]
    if dead_id is not None:
        commands.append(f"{prefix} jobs show {dead_id}{suffix}")
    commands += [f"{prefix} jobs dead{suffix}", f"{prefix} jobs stats{suffix}"]
    return commands


def _problems(summary: Summary, total: int, plan: Plan) -> list[str]:
    """What the database shows that the demo did not expect."""
    found: list[str] = []
    if summary.jobs != total:
        found.append(f"{summary.jobs} rows in queue {summary.queue}, {total} enqueued")
    if summary.states.get("dead", 0) != 1:
        found.append(f"{summary.states.get('dead', 0)} dead jobs, expected exactly 1")
    if summary.states.get("done", 0) != total - 1:
        found.append(f"{summary.states.get('done', 0)} done jobs, expected {total - 1}")
    if plan.planned_retries and summary.jobs_retried == 0:
        found.append("no job shows a second attempt")
    return found


STATE_ORDER = {"done": 0, "dead": 1, "cancelled": 2}
STATE_STYLE = {"done": "green", "dead": "red", "cancelled": "yellow"}


def _render(
    console: Console,
    summary: Summary,
    plan: Plan,
    resolved: ResolvedDatabase,
    next_commands: list[str],
    more: Callable[[], None] | None = None,
) -> None:
    outcome = Table(
        title=f"queue {summary.queue}: what the database shows",
        title_justify="left",
        show_header=False,
    )
    outcome.add_column(style="bold")
    outcome.add_column(justify="right")
    outcome.add_column(style="dim")
    outcome.add_row("jobs", f"{summary.jobs:,}", "rows in x_jobs for this queue")
    for state, count in sorted(summary.states.items(), key=lambda kv: STATE_ORDER.get(kv[0], 9)):
        style = STATE_STYLE.get(state, "cyan")
        outcome.add_row(f"  {state}", f"[{style}]{count:,}[/{style}]", "")
    for attempt, count in summary.attempts.items():
        label = "attempt" if attempt == 1 else "attempts"
        outcome.add_row(f"  {attempt} {label}", f"{count:,}", "jobs that used this many")
    outcome.add_row(
        "retries",
        f"{summary.retries_observed:,}",
        f"on {summary.jobs_retried:,} jobs (planned: {plan.planned_retries:,})",
    )
    outcome.add_row("enqueue", f"{summary.enqueue_s:.2f} s", f"batches of {BATCH}, first to last")
    outcome.add_row("elapsed", f"{summary.elapsed_s:.2f} s", "first enqueue to last finish")
    outcome.add_row("throughput", f"{summary.jobs_per_s:,.0f} jobs/s", "jobs / elapsed")
    console.print(outcome)
    console.print(
        "[dim]times are created_at / finished_at, on the database clock[/dim]", highlight=False
    )
    for record in summary.dead:
        body = Table.grid(padding=(0, 2))
        body.add_column(style="bold")
        body.add_column(overflow="fold")
        body.add_row("id", str(record.id))
        body.add_row("name", record.name)
        body.add_row("attempts", f"{record.attempt}/{record.max_attempts}")
        body.add_row("last error", f"[red]{escape(_last_line(record.last_error))}[/red]")
        console.print(
            Panel(body, title="dead letter", title_align="left", border_style="red", expand=False)
        )
    if more is not None:
        more()
    console.print("[bold]try next[/bold]")
    for cmd in next_commands:
        console.print(f"  [cyan]{escape(cmd)}[/cyan]", soft_wrap=True, highlight=False)
    if resolved.source == "flag" and resolved.masked != resolved.dsn:
        console.print("  [dim](the password is masked: put yours back in --dsn)[/dim]")


def _as_json(
    summary: Summary, plan: Plan, resolved: ResolvedDatabase, next_commands: list[str]
) -> dict[str, Any]:
    return {
        "database": resolved.masked,
        "queue": summary.queue,
        "jobs": summary.jobs,
        "states": summary.states,
        "attempts": {str(k): v for k, v in summary.attempts.items()},
        "retries": {
            "observed": summary.retries_observed,
            "jobs_retried": summary.jobs_retried,
            "planned": plan.planned_retries,
        },
        "dead_letters": [
            {
                "id": str(r.id),
                "name": r.name,
                "attempt": r.attempt,
                "max_attempts": r.max_attempts,
                "last_error": _last_line(r.last_error),
            }
            for r in summary.dead
        ],
        "enqueue_s": round(summary.enqueue_s, 3),
        "elapsed_s": round(summary.elapsed_s, 3),
        "jobs_per_s": round(summary.jobs_per_s, 1),
        "next": next_commands,
    }


def _live_in_queue(introspector: Introspector, queue: str) -> int:
    return sum(s.jobs for s in introspector.stats() if s.queue == queue and s.state in LIVE_STATES)


@click.command()
@click.option(
    "--jobs",
    "total",
    default=DEFAULT_JOBS,
    show_default=True,
    type=int,
    help="How many jobs to enqueue (one of them dead-letters).",
)
@click.option(
    "-c",
    "--concurrency",
    default=8,
    show_default=True,
    type=int,
    help="Worker threads running bodies.",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    type=float,
    help="Give up (exit 1) if the jobs have not all finished after this many seconds.",
)
@click.option(
    "--celery/--no-celery",
    "with_celery",
    default=True,
    show_default=True,
    help="Then run a Celery-style app (chain, group, retry, beat entry) through the bridge, and "
    "drain a backlog Celery published to a filesystem broker onto it.",
)
@dsn_option
@json_option
def demo(
    total: int,
    concurrency: int,
    timeout_s: float,
    with_celery: bool,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Enqueue jobs (some flaky, one hopeless), run a worker, and show what the database says;
    then run a Celery-style app through the bridge."""
    try:
        validation.positive_int("--jobs", total, minimum=2, maximum=MAX_JOBS)
        validation.seconds("--timeout", timeout_s)
        config = WorkerConfig(
            queues=(f"demo-{secrets.token_hex(4)}",),
            concurrency=concurrency,
            poll_s=0.1,  # retries come due after ~50 ms; poll often so the tail stays short
            shutdown_timeout_s=5.0,
        )
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    assert config.queues is not None
    queue = config.queues[0]

    resolved = database(dsn)  # the one line saying which database, password masked
    applied = schema.upgrade(resolved.dsn)
    err = Console(stderr=True)
    if not as_json:
        err.print(
            f"schema: applied {len(applied)} migration(s)" if applied else "schema: up to date"
        )
    plan = _plan(total, queue)
    introspector = Introspector(resolved.dsn)
    worker = Worker(resolved.dsn, registry.from_module(demo_jobs), config)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=err,
        disable=as_json,
    )
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    try:
        worker.start()
        with progress:
            enq = progress.add_task("enqueued", total=total, note="")
            run = progress.add_task("finished", total=total, note="")
            with Client(resolved, max_size=1) as client:
                for start in range(0, total, BATCH):
                    client.enqueue_many(plan.requests[start : start + BATCH])
                    progress.update(enq, completed=min(total, start + BATCH))
                    _show(progress, run, worker)
            checked = time.monotonic()
            while True:
                # The bar counts outcomes the database acknowledged (rows the settle UPDATE
                # returned); the end is decided by the database itself: no live job in the queue
                # (asked when the bar is full, and every second in case a job ended another way).
                finished = _show(progress, run, worker)
                if finished >= total or time.monotonic() - checked >= 1.0:
                    checked = time.monotonic()
                    if _live_in_queue(introspector, queue) == 0:
                        progress.update(run, completed=total)
                        break
                if time.monotonic() > deadline:
                    raise click.ClickException(
                        f"the demo did not finish within {timeout_s:g} s: {finished:,} of "
                        f"{total:,} jobs finished (the rest stay in queue {queue}). The "
                        f"database or machine may be overloaded: inspect with `ujobs-bridge jobs "
                        f"stats`, or rerun with --timeout {timeout_s * 2:g} or fewer --jobs"
                    )
                pause.wait(0.1)
    finally:
        worker.stop(timeout_s=5.0)

    records = introspector.jobs(queue=queue, limit=total + 1)
    summary = _summarise(queue, records)
    dead_id = str(summary.dead[0].id) if summary.dead else None
    next_commands = _next_commands(resolved, queue, dead_id)
    celery_part = migrate_part = None
    if with_celery:
        if not as_json:
            err.print("celery: running ujobs_bridge.demo_celery (chain, group, retry, beat entry)")
        celery_part = celery_demo.run(
            resolved, f"{queue}-celery", concurrency=concurrency, timeout_s=timeout_s
        )
        if not as_json:
            err.print("migrate: Celery publishes to a filesystem broker; drained, then run")
        migrate_part = migrate_demo.run(
            resolved, f"{queue}-migrate", concurrency=concurrency, timeout_s=timeout_s
        )
    if as_json:
        doc = _as_json(summary, plan, resolved, next_commands)
        if celery_part is not None and migrate_part is not None:
            doc["celery"] = celery_part.as_json()
            doc["migrate"] = migrate_part.as_json()
        print_json(doc)
    else:
        console = Console()
        more: Callable[[], None] | None = None
        if celery_part is not None and migrate_part is not None:
            shown = (celery_part, migrate_part)

            def more_parts() -> None:
                celery_demo.render(console, shown[0])
                migrate_demo.render(console, shown[1])

            more = more_parts
        _render(console, summary, plan, resolved, next_commands, more)
    problems = _problems(summary, total, plan)
    if celery_part is not None and migrate_part is not None:
        problems += celery_part.problems() + migrate_part.problems()
    if problems:
        raise click.ClickException(
            "the database does not show the expected outcome: " + "; ".join(problems)
        )


def _show(progress: Progress, run: TaskID, worker: Worker) -> int:
    c = worker.counts
    finished = c.done + c.dead + c.cancelled
    note = f"[yellow]{c.retried:,} retried[/yellow]"
    if c.dead:
        note += f"  [red]{c.dead:,} dead[/red]"
    progress.update(run, completed=finished, note=note)
    return finished
