"""Celery 5 on Redis or RabbitMQ, measured in the bench's cells.

Why it exists: Celery is what ujobs-bridge replaces, so it is the baseline every ratio is taken
against. Workers are the documented command line as subprocesses::

    celery -A bench.celery_app worker -P prefork -c C --without-gossip --without-mingle \
        --without-heartbeat -Q <run queue> -l WARNING

with ``-c 1`` for the "1 worker process" drain and ``-c <cores>`` for the per-core drain and the
latency runs. In the Celery-shaped cells (``bench.cells.CeleryShaped``) it is the other side of
celery_compat: ``noop.delay()`` one by one, the same calls timed in blocks of 1,000 (a broker has
no transaction to put them in), and a ``prefork -c 2`` drain. Completion is counted by the task INCRing a Redis key. The run's queue is purged
through kombu before every cell and deleted at the end; Redis keys are this run's own, in a
dedicated db number. Nothing is FLUSHDB'd.

What it is not: a Celery tuning exercise (see ``celery_app``), or a result-backend benchmark.
"""

from __future__ import annotations

import sys
from pathlib import Path

import celery
import kombu
import redis
from kombu import Connection, Exchange, Queue

from . import cells
from .celery_app import make_app
from .procs import Group, spawn
from .settings import PROJECT_ROOT, REDIS_URL, Settings


class CelerySystem:
    def __init__(self, name: str, broker_url: str, settings: Settings, log_dir: Path) -> None:
        self.name = name
        self.broker_url = broker_url
        self.settings = settings
        self.log_dir = log_dir
        self.queue_name = settings.queue_name(name)
        self.counter_key = settings.key(name, "done")
        self.latency_key = settings.key(name, "latency")
        self.redis = redis.Redis.from_url(REDIS_URL, socket_timeout=10)
        self.app = make_app(
            broker=broker_url,
            queue=self.queue_name,
            redis_url=REDIS_URL,
            counter_key=self.counter_key,
            latency_key=self.latency_key,
        )
        self.noop = self.app.tasks["ujb_bench.noop"]
        self.ping = self.app.tasks["ujb_bench.ping"]
        self._workers = 0

    # -- plumbing -------------------------------------------------------------------------
    def _queue(self) -> Queue:
        return Queue(self.queue_name, Exchange(self.queue_name), routing_key=self.queue_name)

    def _purge(self) -> None:
        with Connection(self.broker_url, connect_timeout=10) as conn:
            bound = self._queue()(conn.default_channel)
            bound.declare()
            bound.purge()

    def _reset(self) -> None:
        self._purge()
        self.redis.delete(self.counter_key, self.latency_key)

    def _done(self) -> int:
        value = self.redis.get(self.counter_key)
        return int(value) if value is not None else 0

    def _spawn_worker(self, concurrency: int) -> Group:
        self._workers += 1
        argv = [
            sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker",
            "-P", "prefork", "-c", str(concurrency),
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-Q", self.queue_name,
            "-n", f"{self.queue_name}_{self._workers}@%h",
            "-l", "WARNING",
        ]  # fmt: skip
        env = {
            "BENCH_CELERY_BROKER": self.broker_url,
            "BENCH_CELERY_QUEUE": self.queue_name,
            "BENCH_REDIS_URL": REDIS_URL,
            "BENCH_COUNTER_KEY": self.counter_key,
            "BENCH_LATENCY_KEY": self.latency_key,
            "PYTHONPATH": str(PROJECT_ROOT),
        }
        return spawn(
            f"{self.name}-c{concurrency}", argv, log_dir=self.log_dir, env=env, cwd=PROJECT_ROOT
        )

    def _publish(self, n: int) -> None:
        with self.app.producer_or_acquire() as producer:
            for _ in range(n):
                self.noop.apply_async(producer=producer)

    # -- lifecycle ------------------------------------------------------------------------
    def setup(self) -> None:
        self.redis.ping()
        self._reset()

    def teardown(self) -> None:
        try:
            with Connection(self.broker_url, connect_timeout=10) as conn:
                channel = conn.default_channel
                bound = self._queue()(channel)
                bound.declare()  # kombu's virtual transports unbind only what this channel knows
                bound.delete()
                Exchange(self.queue_name)(channel).delete()
        finally:
            self.redis.delete(self.counter_key, self.latency_key)
            self._forget_redis_bindings()
            self.app.close()

    def _forget_redis_bindings(self) -> None:
        """Drop this run's members from kombu's Redis binding sets (pidbox, our queue)."""
        if not self.broker_url.startswith("redis"):
            return
        for key in self.redis.scan_iter(match="_kombu.binding*", count=500):
            if self.redis.type(key) != b"set":
                continue  # e.g. the shared deadlines zset; kombu sweeps it itself
            members = self.redis.smembers(key)
            ours = [m for m in members if self.settings.run_id.encode() in m]
            if ours:
                self.redis.srem(key, *ours)
            if self.settings.run_id.encode() in key and not self.redis.scard(key):
                self.redis.delete(key)

    def describe(self) -> dict[str, str]:
        return {
            "celery": celery.__version__,
            "kombu": kombu.__version__,
            "broker": self.broker_url.split("@")[-1],
            "worker": "prefork, -c 1 (1 process) / -c cores (per core), acks early, defaults",
        }

    # -- cells ----------------------------------------------------------------------------
    def enqueue_one_by_one(self, n: int) -> dict[str, float]:
        def send(count: int) -> None:
            for _ in range(count):
                self.noop.delay()

        return {".delay()": cells.enqueue_rate(send, n, self._reset)}

    def enqueue_batched(self, n: int) -> dict[str, float]:
        rate = cells.enqueue_rate(self._publish, n, self._reset)
        return {"apply_async, one shared producer": rate}

    def drain(self, n: int, processes: int) -> dict[str, cells.DrainResult]:
        self._reset()
        self._publish(n)
        result = cells.timed_drain(
            n=n,
            spawn=lambda: [self._spawn_worker(processes)],
            done_count=self._done,
            settings=self.settings,
        )
        self._reset()
        return {f"prefork -c {processes}": result}

    # -- Celery-shaped cells (the same calls celery_compat is measured with) ------------------
    def delay_one(self, n: int) -> dict[str, float]:
        return {".delay()": self.enqueue_one_by_one(n)[".delay()"]}

    def delay_concurrent(self, n: int) -> dict[str, float]:
        """``cells.SENDER_THREADS`` threads of this process sharing the app (its producer
        pool), then ``producers.PRODUCERS`` processes, each with its own app."""
        from . import producers

        def send(count: int) -> None:
            for _ in range(count):
                self.noop.delay()

        threads = cells.SENDER_THREADS
        out = {
            f"{threads} threads of one process": cells.threaded_rate(send, n, self._reset, threads)
        }
        self._reset()
        out[f"{producers.PRODUCERS} processes"] = producers.rate(
            "celery", self.broker_url, n, producers.PRODUCERS,
            self.queue_name, REDIS_URL, self.counter_key,
        )  # fmt: skip
        self._reset()
        return out

    def delay_tx(self, n: int) -> dict[str, float]:
        def send(count: int) -> None:  # the blocks of the bridge's transactions, without them
            for start in range(0, count, cells.TX_SIZE):
                for _ in range(min(cells.TX_SIZE, count - start)):
                    self.noop.delay()

        rate = cells.enqueue_rate(send, n, self._reset)
        return {f"{cells.TX_SIZE:,} x .delay() (a broker has no transaction)": rate}

    def drain_shared(self, n: int) -> dict[str, cells.DrainResult]:
        return self.drain(n, cells.CELERY_PREFORK)

    def idle_latency(self) -> list[float]:
        self._reset()
        worker = self._spawn_worker(self.settings.per_core)
        try:
            return cells.idle_latency(
                send=lambda sent: self.ping.delay(sent),
                receive=cells.redis_receiver(self.redis, self.latency_key),
                settings=self.settings,
                watch=[worker],
            )
        finally:
            worker.stop()
            self._reset()
