"""``ujobs-bridge demo``, first part: the engine, checked against what the database shows.

Why it exists: this part shows what the engine promises. On a queue unique to the run it plans a
few thousand jobs (``demo_jobs.py``: some fail on their first attempt(s) and succeed on retry,
exactly one always fails and dead-letters), enqueues them in batches with
``client.enqueue_many`` while an in-process ``Worker`` runs them, shows a progress bar, then
reads the outcome back FROM THE DATABASE: states, attempts, the dead letter and its last error,
elapsed time and throughput on the database clock. Nothing in the summary is a number the demo
merely believes; ``problems`` says where the rows differ from the plan.

What it is not: the command (``demo.py``: flags, the schema, the other parts, the exit code), or
the Celery-side parts (``celery_compat/cli/demo.py``, ``migrate/cli/demo.py``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
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

from ujobs_bridge._internal.cli import demo_jobs, demo_tables
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.config.dsn import ResolvedDatabase
from ujobs_bridge._internal.observe.introspect import Introspector
from ujobs_bridge._internal.worker.config import WorkerConfig
from ujobs_bridge._internal.worker.loop import Worker
from ujobs_bridge.client import Client
from ujobs_bridge.job import EnqueueRequest
from ujobs_bridge.records import LIVE_STATES, JobRecord, JobState

BATCH = 500
STATE_ORDER = {"done": 0, "dead": 1, "cancelled": 2}
STATE_STYLE = {"done": "green", "dead": "red", "cancelled": "yellow"}


@dataclass(frozen=True, slots=True)
class Plan:
    """What the demo enqueues, decided before anything runs (so the outcome can be checked)."""

    requests: list[EnqueueRequest]
    fail_attempts: list[int]  # planned failures per process_order job
    dead_max_attempts: int

    @property
    def planned_retries(self) -> int:
        return sum(self.fail_attempts) + self.dead_max_attempts - 1


def make_plan(total: int, queue: str) -> Plan:
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


def summarise(queue: str, records: list[JobRecord]) -> Summary:
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


def problems(summary: Summary, total: int, plan: Plan) -> list[str]:
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


def live_in_queue(introspector: Introspector, queue: str) -> int:
    """Jobs of ``queue`` not finished yet, as the database counts them."""
    return sum(s.jobs for s in introspector.stats() if s.queue == queue and s.state in LIVE_STATES)


def run(
    resolved: ResolvedDatabase,
    config: WorkerConfig,
    plan: Plan,
    *,
    timeout_s: float,
    err: Console,
    quiet: bool,
) -> Summary:
    """Run ``plan`` on a Worker for ``config``'s one queue (progress on ``err`` unless
    ``quiet``) until the database shows no live job in it; the rows' ``Summary``."""
    assert config.queues is not None
    queue = config.queues[0]
    total = len(plan.requests)
    introspector = Introspector(resolved.dsn)
    worker = Worker(resolved.dsn, loading.from_module(demo_jobs), config)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=err,
        disable=quiet,
    )
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    try:
        worker.start()
        with progress:
            enq = progress.add_task("enqueued", total=total, note="")
            ran = progress.add_task("finished", total=total, note="")
            with Client(resolved, max_size=1) as client:
                for start in range(0, total, BATCH):
                    client.enqueue_many(plan.requests[start : start + BATCH])
                    progress.update(enq, completed=min(total, start + BATCH))
                    _show(progress, ran, worker)
            checked = time.monotonic()
            while True:
                # The bar counts outcomes the database acknowledged (rows the settle UPDATE
                # returned); the end is decided by the database itself: no live job in the queue
                # (asked when the bar is full, and every second in case a job ended another way).
                finished = _show(progress, ran, worker)
                if finished >= total or time.monotonic() - checked >= 1.0:
                    checked = time.monotonic()
                    if live_in_queue(introspector, queue) == 0:
                        progress.update(ran, completed=total)
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
    return summarise(queue, introspector.jobs(queue=queue, limit=total + 1))


def _show(progress: Progress, ran: TaskID, worker: Worker) -> int:
    c = worker.counts
    finished = c.done + c.dead + c.cancelled
    note = f"[yellow]{c.retried:,} retried[/yellow]"
    if c.dead:
        note += f"  [red]{c.dead:,} dead[/red]"
    progress.update(ran, completed=finished, note=note)
    return finished


def _last_line(text: str | None) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def render(console: Console, summary: Summary, plan: Plan) -> None:
    """The outcome table, where its times come from, and a panel per dead letter."""
    outcome = demo_tables.figures_table(f"queue {summary.queue}: what the database shows")
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
    demo_tables.footnote(console, "times are created_at / finished_at, on the database clock")
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


def as_json(summary: Summary, plan: Plan) -> dict[str, Any]:
    return {
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
    }
