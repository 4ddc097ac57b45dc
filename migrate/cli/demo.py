"""``ujobs-bridge demo``, third part: a Celery backlog drained from a broker and run on the bridge.

Why it exists: the cutover has a third step besides "same code, new engine": the work already
sitting in the old broker must move over, each message once, nothing dropped. So here REAL Celery
(a plain ``celery.Celery`` app, as the project looked before its imports changed) publishes a
batch (``send_task``) to kombu's filesystem transport, which needs no server (its message and
control folders are in a temporary directory, removed afterwards, so nothing lands in the working
directory). One message names a task the new code no longer has. ``migrate``'s drain loop (the
one ``ujobs-bridge migrate`` runs) moves the batch into ``x_jobs`` and quarantines that one with
its reason; a bridge ``Worker`` runs the rows with ``celery_compat.cli.demo_app``'s tasks; the
results are read back with Celery's ``AsyncResult.get``. Every figure shown is one the database
or Celery returned.

What it is not: the drainer (``migrate/``) or the Celery-style app demo (``celery_compat/cli/demo.py``);
``demo.py`` turns what this returns into an exit code.
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celery
from rich.console import Console

from celery_compat.cli.demo_app_worker import app_worker, row_states
from migrate.appinfo import AppInfo
from migrate.batch import Context
from migrate.decoding import Accept
from migrate.report import Stats
from migrate.runner import DrainLoop, SourceOptions, open_source
from ujobs_bridge.ext import cli as engine_cli
from ujobs_bridge.ext import database as connections
from ujobs_bridge.ext.cli import CLI_ROLE, live_in_queue
from ujobs_bridge.ext.database import ResolvedDatabase
from ujobs_bridge.ext.observe import Introspector

BROKER = "filesystem://"
ADDS = 60  # demo.add(i, i)
SQUARES = 40  # demo.square(i)
RETIRED_TASK = "legacy.cleanup"  # published by the old code, gone from the new: quarantined


@dataclass(slots=True)
class MigratePart:
    """What the migrate part saw: counts from the drain report, rows and Celery results."""

    queue: str
    published: int = 0
    drained: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    ran: int = 0
    results_ok: int = 0
    states: dict[str, int] = field(default_factory=dict)
    left_in_broker: int | None = None
    error: str | None = None

    @property
    def expected_runs(self) -> int:
        return ADDS + SQUARES

    def problems(self) -> list[str]:
        if self.error is not None:
            return [f"migrate part: {self.error}"]
        found: list[str] = []
        if self.published != self.expected_runs + 1:
            found.append(f"{self.published} messages published, expected {self.expected_runs + 1}")
        if (self.drained, self.quarantined) != (self.expected_runs, 1):
            found.append(f"drained {self.drained} and quarantined {self.quarantined}")
        if self.left_in_broker:
            found.append(f"{self.left_in_broker} message(s) still in the broker")
        if self.ran != self.drained or self.results_ok != self.drained:
            found.append(f"{self.ran} ran, {self.results_ok} results as expected")
        return found

    def render(self, console: Console) -> None:
        render(console, self)

    def as_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "broker": BROKER,
            "published": self.published,
            "drained": self.drained,
            "quarantined": self.quarantined,
            "quarantined_by_reason": self.reasons,
            "ran": self.ran,
            "results_ok": self.results_ok,
            "states": self.states,
            "left_in_broker": self.left_in_broker,
            "error": self.error,
        }


def _producer(options: dict[str, str], queue: str) -> Any:
    """The old project's side: plain Celery with a filesystem broker. It sends by task name
    (``send_task``), as a producer that does not import the task code does."""
    app = celery.Celery("ujobs_demo_legacy", broker=BROKER, set_as_current=False)
    app.conf.update(
        broker_transport_options=options,
        task_default_queue=queue,
        broker_connection_retry_on_startup=True,
    )
    return app


def _publish(app: Any) -> dict[str, int]:
    """Task id -> the result its task should return."""
    expected: dict[str, int] = {}
    with app.producer_or_acquire() as producer:
        for i in range(ADDS):
            expected[app.send_task("demo.add", (i, i), producer=producer).id] = i + i
        for i in range(SQUARES):
            expected[app.send_task("demo.square", (i,), producer=producer).id] = i * i
        app.send_task(RETIRED_TASK, producer=producer)
    return expected


def _drain(
    resolved: ResolvedDatabase, app: Any, options: dict[str, str], part: MigratePart
) -> None:
    info = dataclasses.replace(AppInfo.from_app(app), transport_options=dict(options))
    source = open_source(BROKER, info, SourceOptions([part.queue]))
    stats = Stats(broker=BROKER, queues=[part.queue])
    try:
        with connections.connect(resolved.dsn, CLI_ROLE) as conn:
            ctx = Context(info, Accept(), BROKER, "kombu")
            DrainLoop(source, conn, ctx, threading.Event()).run(stats)
    finally:
        source.close()
    part.drained = stats.outcomes["moved"]
    part.quarantined = stats.outcomes["quarantined"]
    part.reasons = dict(stats.reasons)
    part.left_in_broker = stats.remaining


def _wait_done(introspector: Introspector, queue: str, timeout_s: float) -> None:
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    while True:
        live = live_in_queue(introspector, queue)
        if live == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{live} drained job(s) still not finished after {timeout_s:g} s")
        pause.wait(0.1)


def run(
    resolved: ResolvedDatabase, queue: str, *, concurrency: int, timeout_s: float
) -> MigratePart:
    """Publish with Celery to a filesystem broker, drain it into ``queue``, run it."""
    # lazy: importing demo_app builds the demo's Celery app, only when this part runs
    from celery_compat.cli import demo_app

    app = demo_app.app
    part = MigratePart(queue=queue)
    introspector = Introspector(resolved.dsn)
    with app_worker(resolved, queue, concurrency=concurrency) as worker:
        try:
            with tempfile.TemporaryDirectory(prefix="ujobs-demo-broker-") as tmp:
                folder = Path(tmp) / "messages"
                folder.mkdir()
                options = {
                    "data_folder_in": str(folder),
                    "data_folder_out": str(folder),
                    "control_folder": str(Path(tmp) / "control"),
                }
                producer = _producer(options, queue)
                try:
                    expected = _publish(producer)
                finally:
                    producer.close()
                part.published = len(expected) + 1
                _drain(resolved, app, options, part)
            worker.start()
            _wait_done(introspector, queue, timeout_s)
            results = {tid: app.AsyncResult(tid).get(timeout=timeout_s) for tid in expected}
            part.results_ok = sum(1 for tid, value in results.items() if value == expected[tid])
        except Exception as exc:  # shown, and turned into the demo's exit code by the caller
            part.error = f"{type(exc).__name__}: {exc}"
    rows = introspector.jobs(queue=queue, limit=1000)
    part.states = row_states(rows)
    part.ran = sum(1 for r in rows if (r.output or {}).get("state") == "SUCCESS")
    return part


def render(console: Console, part: MigratePart) -> None:
    table = engine_cli.demo_figures_table(
        f"a Celery backlog moved onto the bridge: {BROKER} -> queue {part.queue}"
    )
    table.add_row("published", f"{part.published:,}", "by plain celery.Celery send_task()")
    table.add_row("drained", f"{part.drained:,}", "rows in x_jobs, each message once")
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(part.reasons.items()))
    table.add_row(
        "quarantined",
        f"{part.quarantined:,}",
        f"{RETIRED_TASK}, a task the app no longer has ({reasons or '-'}): kept, with its bytes",
    )
    table.add_row(
        "ran",
        f"{part.ran:,}",
        f"on a bridge worker; {part.results_ok:,} results as Celery's AsyncResult.get() expected",
    )
    console.print(table)
    engine_cli.demo_footnote(
        console,
        "from a live broker: ujobs-bridge migrate -A proj [--broker URL]; what it kept "
        "aside: ujobs-bridge migrate quarantine ls",
    )
    engine_cli.demo_failure(console, "migrate", part.error)


class DemoPart:
    """This part as ``ujobs-bridge demo`` runs it (entry ``migrate`` of ``ujobs_bridge.demo``)."""

    intro = "migrate: Celery publishes to a filesystem broker; drained, then run"

    def run(
        self, resolved: ResolvedDatabase, queue: str, *, concurrency: int, timeout_s: float
    ) -> MigratePart:
        return run(resolved, queue, concurrency=concurrency, timeout_s=timeout_s)


PART = DemoPart()
