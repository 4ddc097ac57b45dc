"""``ujobs-bridge migrate`` measured: how fast a Celery backlog moves from a broker into Postgres.

Why it exists: the cutover claim is that a backlog left in Redis or RabbitMQ moves into the
bridge several times faster than Celery could work it off, in flat memory. So, per broker and
round: REAL Celery (``bench.migrate_app``: a plain ``celery.Celery`` app, no-op task, results
ignored) publishes N messages, one in four with ``countdown=3600``, to a queue private to the
run (Redis: db 7, which nothing else here uses; RabbitMQ: a classic queue; both emptied between
drains and deleted at the end of the run). Then the real CLI drains them, as an operator would
run it, into a database made for that drain::

    ujobs-bridge migrate -A bench.migrate_app --broker URL -Q <queue> --dsn DSN --json \\
        --drainer-id <run id>

The clock starts just before the subprocess is spawned and stops when it exits, so CLI
start-up (imports, loading the app, the schema check) is part of the headline figure; the
drainer's own clock (``elapsed_s`` of its ``--json`` report: from before it connects to the
database to the last batch acknowledged) is reported beside it. RSS of the drainer process is sampled
every 50 ms: start = when the first row is visible in ``x_jobs``, end = the last sample before
the process exited, and the peak. A drain counts only if the report says N moved, 0 remaining,
and ``x_jobs`` holds N rows.

What it is not: a measure of running the tasks (``celery-compat`` does that), or of publishing
(Celery's publish rate is not timed here).
"""

from __future__ import annotations

import compileall
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import celery
import kombu
import redis
from kombu import Connection, Exchange, Queue

from . import bridge_cli, cells, machine_cpu, pg
from .migrate_app import NOOP, make_app
from .procs import Group, RssSampler, spawn, wait_until
from .settings import AMQP_URL, PROJECT_ROOT, Settings

# A db number nobody else here uses (tests: 6 and 9-13); BENCH_MIGRATE_REDIS_URL overrides it.
MIGRATE_REDIS_URL = os.environ.get("BENCH_MIGRATE_REDIS_URL", "redis://127.0.0.1:6379/7")
COUNTDOWN_EVERY = 4  # one message in four has countdown=3600 (an ETA row, not due yet)
PUBLISH_TIMEOUT_S = 120.0
FIRST_ROW_POLL_S = 0.01
REDIS_LABEL = "Redis -> Postgres"
AMQP_LABEL = "RabbitMQ -> Postgres"


class MigrateSystem:
    name = "migrate"

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.queue = settings.queue_name(self.name)
        self.drainer_id = f"bench-{settings.run_id}"
        self.redis = redis.Redis.from_url(MIGRATE_REDIS_URL, socket_timeout=10)
        self.brokers = {REDIS_LABEL: MIGRATE_REDIS_URL, AMQP_LABEL: AMQP_URL}
        self.apps = {
            label: make_app(broker=url, queue=self.queue) for label, url in self.brokers.items()
        }
        self._drains = 0

    # -- lifecycle ------------------------------------------------------------------------
    def setup(self) -> None:
        self.redis.ping()
        with Connection(AMQP_URL, connect_timeout=10) as conn:
            conn.ensure_connection(max_retries=1)
        _compile_project()

    def teardown(self) -> None:
        try:
            self._delete_amqp_queue()
        finally:
            self._forget_redis_keys(bindings=True)
            for app in self.apps.values():
                app.close()

    def describe(self) -> dict[str, str]:
        return {
            "celery": celery.__version__,
            "kombu": kombu.__version__,
            "producer": f"celery.Celery apply_async, 1 in {COUNTDOWN_EVERY} with countdown=3600",
            "brokers": f"{MIGRATE_REDIS_URL} (queue list), {AMQP_URL.split('@')[-1]} (classic queue)",
            "drainer": "ujobs-bridge migrate -A bench.migrate_app --json (a subprocess, defaults)",
        }

    # -- the cell -------------------------------------------------------------------------
    def drain_broker(self, n: int) -> dict[str, cells.MigrateResult]:
        out: dict[str, cells.MigrateResult] = {}
        for label, url in self.brokers.items():
            self._purge()
            try:
                self._publish(label, n)
                out[label] = self._drain(label, url, n)
            finally:
                self._purge()
        return out

    # -- plumbing -------------------------------------------------------------------------
    def _publish(self, label: str, n: int) -> None:
        app = self.apps[label]
        task = app.tasks[NOOP]
        with app.producer_or_acquire() as producer:
            for i in range(n):
                countdown = 3600 if i % COUNTDOWN_EVERY == 0 else None
                task.apply_async((i,), countdown=countdown, producer=producer)
        wait_until(
            lambda: self._waiting(label) >= n or None,
            timeout_s=PUBLISH_TIMEOUT_S,
            what=f"{n:,} messages in {label.split()[0]}",
        )

    def _waiting(self, label: str) -> int:
        if label == REDIS_LABEL:
            return int(
                sum(self.redis.llen(k) for k in self.redis.scan_iter(match=f"{self.queue}*"))
            )
        with Connection(AMQP_URL, connect_timeout=10) as conn:
            declared = conn.default_channel.queue_declare(self.queue, passive=True)
            return int(declared.message_count)

    def _drain(self, label: str, url: str, n: int) -> cells.MigrateResult:
        self._drains += 1
        dbname = f"{self.settings.database_name(self.name)}_{self._drains}"
        dsn = bridge_cli.fresh_database(dbname)
        try:
            return self._timed(label, url, dsn, n)
        finally:
            pg.drop(dbname)

    def _timed(self, label: str, url: str, dsn: str, n: int) -> cells.MigrateResult:
        argv = [
            *bridge_cli.command(), "migrate", "-A", "bench.migrate_app", "--broker", url,
            "-Q", self.queue, "--dsn", dsn, "--json", "--drainer-id", self.drainer_id,
        ]  # fmt: skip
        env = {
            "PYTHONPATH": str(PROJECT_ROOT),
            "BENCH_MIGRATE_BROKER": url,
            "BENCH_MIGRATE_QUEUE": self.queue,
        }
        first: list[float] = []
        first_rss: list[int] = []
        broker = self._broker_pid(label)
        busy, broker_cpu = machine_cpu.machine_busy_s(), machine_cpu.process_cpu_s(broker)
        t0 = time.perf_counter()
        group = spawn("migrate", argv, log_dir=self.log_dir, env=env, cwd=PROJECT_ROOT)
        try:
            with RssSampler([group.pgid], self.settings.rss_sample_s) as sampler:
                watcher = threading.Thread(
                    target=self._first_row,
                    args=(dsn, group, sampler, t0, first, first_rss),
                    name="first-row",
                    daemon=True,
                )
                watcher.start()
                code = group.popen.wait(timeout=self.settings.drain_deadline)
                seconds = time.perf_counter() - t0
                busy = machine_cpu.machine_busy_s() - busy
                broker_cpu = machine_cpu.process_cpu_s(broker) - broker_cpu
                watcher.join(timeout=5)
                alive = [s for s in sampler.samples if s > 0]
        finally:
            group.stop()
        if code != 0:
            raise RuntimeError(f"migrate exited {code}; last lines:\n{group.log_tail()}")
        report = _report(group)
        self._check(label, dsn, n, report)
        return cells.MigrateResult(
            jobs=n,
            seconds=seconds,
            first_seconds=first[0] if first else float("nan"),
            first_count=0,
            final_count=int(report["moved"]),
            rss_start=first_rss[0] if first_rss else (alive[0] if alive else 0),
            rss_end=alive[-1] if alive else 0,
            rss_peak=max(alive, default=0),
            own_seconds=float(report["elapsed_s"]),
            machine_cpu_s=busy,
            broker_cpu_s=broker_cpu,
        )

    def _broker_pid(self, label: str) -> int | None:
        """The local broker's process, for its share of the machine's CPU (None: unknown)."""
        if label == REDIS_LABEL:
            try:
                return int(self.redis.info("server")["process_id"])
            except (redis.RedisError, KeyError, TypeError, ValueError):
                return None
        return machine_cpu.find_process("beam.smp")  # RabbitMQ's Erlang VM

    def _first_row(
        self,
        dsn: str,
        group: Group,
        sampler: RssSampler,
        t0: float,
        first: list[float],
        first_rss: list[int],
    ) -> None:
        """Notes when the first row is visible and the drainer's RSS at that moment."""
        with pg.connect(dsn) as conn:
            while group.exited() is None:
                if conn.execute("select 1 from x_jobs limit 1").fetchone() is not None:
                    first.append(time.perf_counter() - t0)
                    first_rss.append(sampler.sample())
                    return
                time.sleep(FIRST_ROW_POLL_S)

    def _check(self, label: str, dsn: str, n: int, report: dict[str, Any]) -> None:
        with pg.connect(dsn) as conn:
            row = conn.execute("select count(*) from x_jobs").fetchone()
        rows = int(row[0]) if row else 0
        if (report.get("moved"), report.get("remaining"), rows) != (n, 0, n):
            raise RuntimeError(
                f"{label}: the drain did not move all {n:,} messages: report moved "
                f"{report.get('moved')}, remaining {report.get('remaining')}, "
                f"quarantined {report.get('quarantined')}; x_jobs holds {rows:,} rows"
            )

    def _purge(self) -> None:
        """Empty the queues between drains. They are not deleted: Celery declares a queue (and
        kombu's Redis binding) once per app, and would then publish into nothing."""
        self._forget_redis_keys(bindings=False)
        with Connection(AMQP_URL, connect_timeout=10) as conn:
            bound = Queue(self.queue, Exchange(self.queue), routing_key=self.queue)
            bound(conn.default_channel).declare()
            bound(conn.default_channel).purge()

    def _delete_amqp_queue(self) -> None:
        with Connection(AMQP_URL, connect_timeout=10) as conn:
            channel = conn.default_channel
            bound = Queue(self.queue, Exchange(self.queue), routing_key=self.queue)(channel)
            bound.declare()
            bound.delete()
            Exchange(self.queue)(channel).delete()

    def _forget_redis_keys(self, *, bindings: bool) -> None:
        """Every key of this run in db 7 (queue lists, processing lists, heartbeat); with
        ``bindings``, also kombu's binding sets of this run and its members in others."""
        marker = self.settings.run_id.encode()
        for key in list(self.redis.scan_iter(count=1000)):
            binding = key.startswith(b"_kombu.binding")
            if binding and not bindings:
                continue
            if marker in key:
                self.redis.delete(key)
            elif binding and self.redis.type(key) == b"set":
                ours = [m for m in self.redis.smembers(key) if marker in m]
                if ours:
                    self.redis.srem(key, *ours)


def _compile_project() -> None:
    """Bytecode for the project's own packages, as an installed package has it (pip compiles at
    install; Celery, kombu and psycopg in site-packages have theirs). Without it the timed
    start-up would include compiling about a hundred modules on every spawn wherever
    ``PYTHONDONTWRITEBYTECODE`` is set, which no deployment pays. ``compileall`` writes the
    ``__pycache__`` files whatever that variable says; the sources are not changed."""
    for package in ("ujobs_bridge", "celery_compat", "migrate", "bench"):
        compileall.compile_dir(PROJECT_ROOT / package, quiet=1)


def _report(group: Group) -> dict[str, Any]:
    text = group.log_path.read_text(errors="replace")
    start = text.find("{")
    if start < 0:
        raise RuntimeError(f"migrate printed no JSON report:\n{group.log_tail()}")
    doc: dict[str, Any] = json.loads(text[start : text.rindex("}") + 1])
    return doc
