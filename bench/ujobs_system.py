"""ujobs-bridge itself, measured in the bench's cells through its public API only.

Why it exists: this is the system the targets are about. It is kept apart from the baselines so
that the engine can change under it: everything it uses is the documented surface::

    from ujobs_bridge import connect            # a Client owning a psycopg pool
    noop.configure(client=client).enqueue()      # one-by-one, one round trip
    client.enqueue_many([noop.call() ...])       # batched, one statement
    ujobs-bridge db upgrade --dsn DSN            # schema
    ujobs-bridge worker --dsn DSN -A bench.ujobs_tasks -Q bench -c 8

Drain completion is ``select count(*) from x_jobs where queue='bench' and state='done'`` polled
every ~20 ms on the bench's own connection. "1 worker process" is one ``worker -c 8``; "per
core" is one such process per core. The step-overhead cell drains N ``noop`` jobs and N
``five_steps`` jobs with that same one ``worker -c 8``, back to back (which one goes first
alternates by round, so drift within a round does not always favour the same one).

What it is not: a test of the engine's guarantees (that is ``tests/``), nor a tuned setup: the
worker runs with its defaults apart from ``-c 8``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
import redis

from . import cells, pg
from .procs import Group, spawn
from .settings import PROJECT_ROOT, REDIS_URL, Settings

CONCURRENCY = 8
UPGRADE_TIMEOUT_S = 120


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "ujobs-bridge"
    if script.exists():
        return [str(script)]
    found = shutil.which("ujobs-bridge")
    return [found] if found else [sys.executable, "-m", "ujobs_bridge"]


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
        self._created = False

    # -- plumbing -------------------------------------------------------------------------
    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            self._conn = pg.connect(self.dsn)
        return self._conn

    def _reset(self) -> None:
        self.conn.execute("truncate x_jobs cascade")  # steps etc. reference it

    def _done(self) -> int:
        row = self.conn.execute(
            "select count(*) from x_jobs where queue = 'bench' and state = 'done'"
        ).fetchone()
        return int(row[0]) if row else 0

    def _fill(self, n: int, body: Any = None) -> None:
        from .ujobs_tasks import noop

        self._reset()
        self.client.enqueue_many([(body or noop).call() for _ in range(n)])
        self.conn.execute("analyze x_jobs")

    def _spawn_worker(self, index: int) -> Group:
        argv = [
            *_cli(), "worker", "--dsn", self.dsn, "-A", "bench.ujobs_tasks",
            "-Q", "bench", "-c", str(CONCURRENCY),
        ]  # fmt: skip
        env = {
            "PYTHONPATH": str(PROJECT_ROOT),
            "BENCH_REDIS_URL": REDIS_URL,
            "BENCH_LATENCY_KEY": self.latency_key,
        }
        return spawn(f"ujobs-worker-{index}", argv, log_dir=self.log_dir, env=env, cwd=PROJECT_ROOT)

    # -- lifecycle ------------------------------------------------------------------------
    def setup(self) -> None:
        from ujobs_bridge import connect

        from . import ujobs_tasks  # fail early, with the import error, if the API moved

        assert ujobs_tasks.noop.queue == ujobs_tasks.five_steps.queue == "bench"
        assert ujobs_tasks.STEPS == cells.STEP_COUNT
        pg.create(self.dbname)
        self._created = True
        self.dsn = pg.url_for(self.dbname)
        done = subprocess.run(
            [*_cli(), "db", "upgrade", "--dsn", self.dsn],
            capture_output=True,
            text=True,
            timeout=UPGRADE_TIMEOUT_S,
            cwd=PROJECT_ROOT,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ujobs-bridge db upgrade failed:\n{done.stdout}{done.stderr}")
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
            if self._created:
                pg.drop(self.dbname)

    def describe(self) -> dict[str, str]:
        try:
            version = metadata.version("ujobs-bridge")
        except metadata.PackageNotFoundError:
            version = "?"
        return {
            "ujobs-bridge": version,
            "psycopg": psycopg.__version__,
            "worker": f"ujobs-bridge worker -c {CONCURRENCY} (defaults otherwise)",
        }

    # -- cells ----------------------------------------------------------------------------
    def enqueue_one_by_one(self, n: int) -> dict[str, float]:
        from .ujobs_tasks import noop

        call = noop.configure(client=self.client)
        for _ in range(cells.WARMUP_ENQUEUES):
            call.enqueue()
        self._reset()
        t0 = time.perf_counter()
        for _ in range(n):
            call.enqueue()
        rate = n / (time.perf_counter() - t0)
        self._reset()
        return {"configure(client=).enqueue()": rate}

    def enqueue_batched(self, n: int) -> dict[str, float]:
        from .ujobs_tasks import noop

        self.client.enqueue_many([noop.call() for _ in range(cells.WARMUP_ENQUEUES)])
        self._reset()
        t0 = time.perf_counter()
        self.client.enqueue_many([noop.call() for _ in range(n)])
        rate = n / (time.perf_counter() - t0)
        self._reset()
        return {"client.enqueue_many([...])": rate}

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
        for label, body in bodies if rnd % 2 == 0 else bodies[::-1]:
            self._fill(n, body)
            out[label] = cells.timed_drain(
                n=n,
                spawn=lambda: [self._spawn_worker(0)],
                done_count=self._done,
                settings=self.settings,
                report_rss=False,
            )
            self._reset()
        return {label: out[label] for label, _ in bodies}

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
