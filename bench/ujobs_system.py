"""ujobs-bridge itself, measured in the bench's cells through its public API only.

Why it exists: this is the system the targets are about. It is kept apart from the baselines so
that the engine can change under it: everything it uses is the documented surface::

    from ujobs_bridge import connect            # a Client owning a psycopg pool
    noop.configure(client=client).enqueue()      # one-by-one, one round trip, one statement
    noop.configure(client=client, send_commit="off").enqueue()   # the same, before the flush
    client.enqueue_many([noop.call() ...])       # batched, one statement
    ujobs-bridge db upgrade --dsn DSN            # schema
    ujobs-bridge worker --dsn DSN -A bench.ujobs_tasks -Q bench -c 8

Drain completion is ``select count(*) from x_jobs where queue='bench' and state='done'`` polled
every ``poll_s`` on the bench's own connection (the CLI calls and that count are ``bridge_cli``'s).
"1 worker process" is one ``worker -c 8``; "per core" is one such process per core. The
step-overhead cell drains N ``noop`` jobs and N ``five_steps`` jobs with that same one
``worker -c 8``, back to back (which one goes first alternates by round, so drift within a round
does not always favour the same one), then the same pair at ``-c 16`` and at ``-c 1`` (N/10).

What it is not: a test of the engine's guarantees (that is ``tests/``), nor a tuned setup: the
worker runs with its defaults apart from ``-c 8``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import redis

from . import (
    bridge_cli,
    cells,
    dashboard_bench,
    fleet_latency,
    lean_table,
    many_workers,
    pg,
    private_pg,
)
from .bridge_cli import CONCURRENCY
from .procs import Group
from .settings import REDIS_URL, Settings


class UjobsSystem:
    name = "ujobs"

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.dbname = settings.database_name(self.name)
        self.dsn = ""
        self.latency_key = settings.key(self.name, "latency")
        self.redis = redis.Redis.from_url(REDIS_URL, socket_timeout=10)
        self.client: Any = None
        self._conn: psycopg.Connection[Any] | None = None

    # -- plumbing -------------------------------------------------------------------------
    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            self._conn = pg.connect(self.dsn)
        return self._conn

    def _reset(self) -> None:
        pg.empty_jobs(self.conn)  # steps etc. reference x_jobs

    def _done(self) -> int:
        return bridge_cli.done_count(self.conn, "bench")

    def _fill(self, n: int, body: Any = None) -> None:
        from .ujobs_tasks import noop

        self._reset()
        self.client.enqueue_many([(body or noop).call() for _ in range(n)])
        self.conn.execute("analyze x_jobs")

    def _spawn_workers(self, processes: int, concurrency: int = CONCURRENCY) -> list[Group]:
        return [self._spawn_worker(i, concurrency) for i in range(processes)]

    def _spawn_worker(self, index: int, concurrency: int = CONCURRENCY) -> Group:
        return bridge_cli.spawn_worker(
            f"ujobs-worker-{index}",
            dsn=self.dsn,
            tasks="bench.ujobs_tasks",
            queue="bench",
            log_dir=self.log_dir,
            env={"BENCH_REDIS_URL": REDIS_URL, "BENCH_LATENCY_KEY": self.latency_key},
            concurrency=concurrency,
        )

    # -- lifecycle ------------------------------------------------------------------------
    def setup(self) -> None:
        from ujobs_bridge import connect

        from . import ujobs_tasks  # fail early, with the import error, if the API moved

        assert ujobs_tasks.noop.queue == ujobs_tasks.five_steps.queue == "bench"
        assert ujobs_tasks.STEPS == cells.STEP_COUNT
        self.dsn = bridge_cli.fresh_database(self.dbname)
        self.client = connect(self.dsn)

    def teardown(self) -> None:
        try:
            if self.client is not None:
                self.client.close()
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self.redis.delete(self.latency_key)
        finally:
            if self.dsn:
                pg.drop(self.dbname)

    def describe(self) -> dict[str, str]:
        return {
            "ujobs-bridge": bridge_cli.version(),
            "psycopg": psycopg.__version__,
            "worker": f"ujobs-bridge worker -c {CONCURRENCY} (defaults otherwise)",
        }

    # -- cells ----------------------------------------------------------------------------
    def enqueue_one_by_one(self, n: int) -> dict[str, float]:
        from .ujobs_tasks import noop

        out: dict[str, float] = {}
        for label, call in (
            ("configure(client=).enqueue()", noop.configure(client=self.client)),
            (
                'configure(client=, send_commit="off").enqueue() (before the WAL flush)',
                noop.configure(client=self.client, send_commit="off"),
            ),
        ):

            def send(count: int, call: Any = call) -> None:
                for _ in range(count):
                    call.enqueue()

            out[label] = cells.enqueue_rate(send, n, self._reset)
        return out

    def enqueue_producers(self, n: int) -> dict[str, float]:
        """``producers.PRODUCERS`` processes, each ``noop.enqueue()`` on its own client: with no
        worker waiting for the queue (every worker busy: the inserts notify nobody, 0021) and
        with one waiting (a registered node's mark, as an idle worker leaves: each notifies)."""
        from ujobs_bridge._internal.db import nodes

        from . import producers

        out: dict[str, float] = {}
        self._reset()
        out["no worker waiting"] = producers.rate("ujobs", self.dsn, n)
        self._reset()
        out['no worker waiting, send_commit="off"'] = producers.rate("ujobs-off", self.dsn, n)
        self._reset()
        node = nodes.NodeSpec(
            worker_id=producers.WAITING_WORKER, name=producers.WAITING_WORKER, hostname="bench",
            pid=0, queues=["bench"], concurrency=1, pool="threads", info={},
        )  # fmt: skip
        nodes.node_register(self.conn, node, 3600.0, None)
        try:
            nodes.queue_waiting_mark(self.conn, producers.WAITING_WORKER, ["bench"], None)
            out["a worker waiting (each insert notifies)"] = producers.rate("ujobs", self.dsn, n)
        finally:
            nodes.node_delete(self.conn, producers.WAITING_WORKER)
            self._reset()
        return out

    def enqueue_batched(self, n: int) -> dict[str, float]:
        from .ujobs_tasks import noop

        def send(count: int) -> None:
            self.client.enqueue_many([noop.call() for _ in range(count)])

        return {"client.enqueue_many([...])": cells.enqueue_rate(send, n, self._reset)}

    def drain(self, n: int, processes: int) -> dict[str, cells.DrainResult]:
        self._fill(n)
        result = cells.timed_drain(
            n=n,
            spawn=lambda: [self._spawn_worker(i) for i in range(processes)],
            done_count=self._done,
            settings=self.settings,
        )
        self._reset()
        plural = "es" if processes > 1 else ""
        return {f"{processes} process{plural} x worker -c {CONCURRENCY}": result}

    def step_overhead(self, n: int, rnd: int) -> dict[str, cells.DrainResult]:
        from .ujobs_tasks import five_steps, noop

        bodies = [(cells.PLAIN_LABEL, noop), (cells.STEPS_LABEL, five_steps)]
        out: dict[str, cells.DrainResult] = {}
        for concurrency in cells.STEP_BODIES:
            suffix = cells.bodies_suffix(concurrency)
            jobs = n if concurrency > 1 else max(50, n // cells.SINGLE_BODY_SHARE)
            for label, body in bodies if rnd % 2 == 0 else bodies[::-1]:
                self._fill(jobs, body)
                out[label + suffix] = cells.timed_drain(
                    n=jobs,
                    spawn=partial(self._spawn_workers, 1, concurrency),
                    done_count=self._done,
                    settings=self.settings,
                    report_rss=False,
                )
                self._reset()
        return out

    def lean_table(self, n: int) -> lean_table.LeanResult:
        """The lean-table cell on a server of its own (``lean_table``, ``private_pg``)."""
        extra = private_pg.parse_settings(os.environ.get("BENCH_LEAN_PG", ""))
        return lean_table.run(
            n,
            processes=self.settings.per_core,
            log_dir=self.log_dir,
            settings={**lean_table.RECOMMENDED, **extra},
            deadline_s=self.settings.lean_deadline,
        )

    def dashboard_pages(self, rows: int) -> dashboard_bench.DashboardResult:
        """The dashboard cell: a database of its own with ``rows`` jobs, each page timed."""
        return dashboard_bench.measure(rows, self.settings.dashboard_requests)

    def many_workers(self, n: int, counts: Sequence[int]) -> list[many_workers.ScalePoint]:
        """The many-workers cell on this system's database (``many_workers``)."""
        self._reset()
        return many_workers.run(
            client=self.client,
            conn=self.conn,
            dbname=self.dbname,
            url=self.dsn,
            n=n,
            counts=counts,
            settings=self.settings,
            log_dir=self.log_dir,
        )

    def fleet_latency(self) -> list[fleet_latency.FleetPoint]:
        from .ujobs_tasks import ping

        self._reset()
        self.redis.delete(self.latency_key)
        call = ping.configure(client=self.client)
        try:
            return fleet_latency.run(
                conn=self.conn,
                dbname=self.dbname,
                url=self.dsn,
                env={"BENCH_REDIS_URL": REDIS_URL, "BENCH_LATENCY_KEY": self.latency_key},
                send=lambda sent: call.enqueue(sent),
                receive=cells.redis_receiver(self.redis, self.latency_key),
                settings=self.settings,
                log_dir=self.log_dir,
            )
        finally:
            self.redis.delete(self.latency_key)
            self._reset()

    def idle_latency(self) -> list[float]:
        from .ujobs_tasks import ping

        self._reset()
        self.redis.delete(self.latency_key)
        worker = self._spawn_worker(0)
        call = ping.configure(client=self.client)
        try:
            return cells.idle_latency(
                send=lambda sent: call.enqueue(sent),
                receive=cells.redis_receiver(self.redis, self.latency_key),
                settings=self.settings,
                watch=[worker],
            )
        finally:
            worker.stop()
            self.redis.delete(self.latency_key)
            self._reset()
