"""``ujobs-bridge demo``, second part: a Celery-style app run through the bridge.

Why it exists: the demo's first part shows the engine; this one shows the cutover. The app in
``ujobs_bridge/demo_app.py`` is ordinary Celery code (``shared_task``, ``self.retry``, a
``beat_schedule``). Here it is routed to a queue unique to the run (``<demo queue>-celery``),
given a beat entry unique to the run, and run by an in-process bridge ``Worker`` (built with
``celery_compat.worker.execution.jobs_for_app``, as ``worker -A`` does) and an in-process
``Scheduler`` (the app's beat entries via ``celery_compat.beat.entries``, as ``scheduler -A`` does, on a
lease group of its own so a scheduler already running on the database is not disturbed). It
sends a chain, a group and a task that retries once, waits for their results with Celery's own
``AsyncResult.get``, waits for the beat entry's first fire, then reads the run's rows back from
``x_jobs``: each figure shown is one Celery returned or one the database holds.

What it is not: the engine demo (``engine_demo.py``), or a test: ``demo.py`` turns what this
returns into an exit code.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from celery import group
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from celery_compat.beat.entries import periodic_tasks_for_app
from celery_compat.cli.demo_app_worker import app_worker, row_states
from ujobs_bridge.ext import cli as engine_cli
from ujobs_bridge.ext.database import ResolvedDatabase
from ujobs_bridge.ext.observe import Introspector
from ujobs_bridge.ext.scheduling import Scheduler
from ujobs_bridge.records import JobRecord

CHAIN_CODE = "(add.s(2, 3) | mul.s(10) | add.s(7))()"
CHAIN_EXPECTED = 57
GROUP_CODE = "group(square.s(i) for i in range(5))()"
GROUP_EXPECTED = [0, 1, 4, 9, 16]
RETRY_CODE = "flaky_fetch.delay(url): self.retry() once"
RETRY_EXPECTED = 1
FEED_URL = "https://example.com/feed.xml"
SCHEDULER_ROUND_S = 0.2


@dataclass(slots=True)
class CeleryPart:
    """What the Celery part saw: results as Celery returned them, rows as the database holds."""

    queue: str
    chain: Any = None
    group: Any = None
    retry: Any = None
    retry_rows: list[dict[str, Any]] = field(default_factory=list)
    beat_entry: str = ""
    beat_fired: int = 0
    beat_result: Any = None
    states: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def problems(self) -> list[str]:
        found: list[str] = []
        if self.error is not None:
            return [f"Celery part: {self.error}"]
        if self.chain != CHAIN_EXPECTED:
            found.append(f"chain returned {self.chain!r}, expected {CHAIN_EXPECTED}")
        if self.group != GROUP_EXPECTED:
            found.append(f"group returned {self.group!r}, expected {GROUP_EXPECTED}")
        retries = self.retry.get("retries") if isinstance(self.retry, dict) else None
        if retries != RETRY_EXPECTED or len(self.retry_rows) != RETRY_EXPECTED + 1:
            found.append(f"the retrying task shows {retries!r} retries in {self.retry_rows}")
        if self.beat_fired < 1 or not isinstance(self.beat_result, dict):
            found.append(f"beat entry {self.beat_entry!r} did not run")
        if set(self.states) - {"done"}:
            found.append(f"Celery-part rows not all done: {self.states}")
        return found

    def render(self, console: Console) -> None:
        render(console, self)

    def as_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "chain": self.chain,
            "group": self.group,
            "retry": {"result": self.retry, "rows": self.retry_rows},
            "beat": {
                "entry": self.beat_entry,
                "fired": self.beat_fired,
                "result": self.beat_result,
            },
            "states": self.states,
            "error": self.error,
        }


def run(
    resolved: ResolvedDatabase, queue: str, *, concurrency: int, timeout_s: float
) -> CeleryPart:
    """Run the Celery-style app's chain, group, retry and beat entry on ``queue``."""
    # lazy: importing demo_app builds the demo's Celery app, only when this part runs
    from celery_compat.cli import demo_app as demo

    app = demo.app
    part = CeleryPart(queue=queue, beat_entry=f"demo heartbeat {queue}")
    app.conf.task_default_queue = queue
    app.conf.beat_schedule = {
        part.beat_entry: {"task": "demo.heartbeat", "schedule": demo.HEARTBEAT_EVERY}
    }
    app.set_current()
    introspector = Introspector(resolved.dsn)
    with app_worker(resolved, queue, concurrency=concurrency) as worker:
        tasks = {p.name: p for p in periodic_tasks_for_app(app)}
        scheduler = Scheduler(resolved.dsn, tasks, interval_s=SCHEDULER_ROUND_S, group=queue)
        try:
            worker.start()
            scheduler.start()
            chained = (demo.add.s(2, 3) | demo.mul.s(10) | demo.add.s(7))()
            grouped = group(demo.square.s(i) for i in range(5))()
            fetched = demo.flaky_fetch.delay(FEED_URL)
            part.chain = chained.get(timeout=timeout_s)
            part.group = grouped.get(timeout=timeout_s)
            part.retry = fetched.get(timeout=timeout_s)
            beat_row = _first_beat_run(introspector, queue, timeout_s)
            part.beat_fired = scheduler.counts.fired
            part.beat_result = app.AsyncResult(_task_id(beat_row)).get(timeout=timeout_s)
        except Exception as exc:  # shown, and turned into the demo's exit code by the caller
            part.error = f"{type(exc).__name__}: {exc}"
        finally:
            scheduler.stop()
    rows = introspector.jobs(queue=queue, limit=1000)
    part.states = row_states(rows)
    part.retry_rows = [
        {
            "retries": (r.input.get("headers") or {}).get("retries"),
            "state": r.state.value,
            "celery_state": (r.output or {}).get("state"),
        }
        for r in sorted(rows, key=lambda r: r.created_at)
        if r.name == "demo.flaky_fetch"
    ]
    return part


def _task_id(row: JobRecord) -> str:
    return str((row.input.get("headers") or {})["id"])


def _first_beat_run(introspector: Introspector, queue: str, timeout_s: float) -> JobRecord:
    """The first heartbeat row the scheduler sent and the worker finished (polled, bounded)."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    while True:
        rows = introspector.jobs(queue=queue, name="demo.heartbeat", limit=10)
        done = sorted((r for r in rows if r.state.value == "done"), key=lambda r: r.created_at)
        if done:
            return done[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"the beat entry did not run within {timeout_s:g} s")
        pause.wait(0.1)


def render(console: Console, part: CeleryPart) -> None:
    table = Table(
        title=f"celery_compat.cli.demo_app on the bridge: queue {part.queue}",
        title_justify="left",
    )
    table.add_column("Celery code")
    table.add_column("result", justify="right", no_wrap=True)
    table.add_column("rows in x_jobs", no_wrap=True)
    table.add_row(f"[bold]chain[/bold] {CHAIN_CODE}", _ok(part.chain), "3 done (a link each)")
    table.add_row(f"[bold]group[/bold] {GROUP_CODE}", _ok(part.group), "5 done")
    retries = part.retry.get("retries") if isinstance(part.retry, dict) else None
    states = " → ".join(str(r["celery_state"]) for r in part.retry_rows)
    table.add_row(f"[bold]retry[/bold] {RETRY_CODE}", _ok(retries, " retry"), states or "-")
    occurrence = part.beat_result.get("occurrence") if isinstance(part.beat_result, dict) else None
    table.add_row(
        f"[bold]beat[/bold] beat_schedule entry, every {_seconds()} s",
        _ok(occurrence[11:19] + " UTC" if occurrence else None, prefix="fired "),
        f"{part.beat_fired} fire(s)",
    )
    console.print(table)
    states_all = ", ".join(f"{k} {v}" for k, v in part.states.items())
    engine_cli.demo_footnote(
        console,
        f"results read back with Celery's AsyncResult.get(); the beat entry ran on the "
        f"ujobs scheduler; rows of queue {part.queue}: {states_all}",
    )
    engine_cli.demo_failure(console, "Celery", part.error)


def _ok(value: Any, suffix: str = "", prefix: str = "") -> str:
    if value is None:
        return "[red]-[/red]"
    return f"[green]{escape(prefix + str(value) + suffix)}[/green]"


def _seconds() -> str:
    # lazy: importing demo_app builds the demo's Celery app (see run)
    from celery_compat.cli import demo_app

    return f"{demo_app.HEARTBEAT_EVERY.total_seconds():g}"


class DemoPart:
    """This part as ``ujobs-bridge demo`` runs it (entry ``celery`` of ``ujobs_bridge.demo``)."""

    intro = "celery: running celery_compat.cli.demo_app (chain, group, retry, beat entry)"

    def run(
        self, resolved: ResolvedDatabase, queue: str, *, concurrency: int, timeout_s: float
    ) -> CeleryPart:
        return run(resolved, queue, concurrency=concurrency, timeout_s=timeout_s)


PART = DemoPart()
