"""The raw Postgres ceiling, measured in the bench's cells.

Why it exists: ratios against Celery say whether ujobs-bridge is worth switching to; ratios
against a bare ``SKIP LOCKED`` loop on a minimal table say how much the engine costs over what
Postgres itself allows. The table (``raw_jobs``) lives in its own fresh database; it has one
partial index for the claim, like any sane queue table. Enqueue paths:

- one-by-one: one transaction per row, as an autocommit ``INSERT`` (one round trip) and as
  ``INSERT`` + ``COMMIT`` (two);
- batched: one multi-row ``INSERT ... VALUES (..), (..)`` in one transaction, and ``COPY``;
- Celery's own ``.delay()``, its message one autocommit ``INSERT`` (``raw_send``): the ceiling
  of the Celery-shaped ``.delay()`` cell, flushed and with ``synchronous_commit=off``.

Durable steps (``step_ceiling``): threads, each its own connection, each step one committed
``INSERT`` into ``raw_steps``: the ceiling of the step-overhead cell.

Drains use ``raw_consumer`` processes claiming k = 1, 10 and 100 rows per statement (two commits
per batch), with 1 and with one-per-core consumers. Latency: the producer inserts and notifies
in one statement (``INSERT ... RETURNING`` + ``pg_notify``); one LISTENing consumer measures.

What it is not: a fair competitor. It has no leases, retries or payload handling; it is a
ceiling, and ratios against it are expected to be below 1.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import redis

from . import cells, pg
from .procs import Group, spawn
from .raw_consumer import CHANNEL
from .settings import PROJECT_ROOT, REDIS_URL, Settings

SCHEMA = """
create table raw_jobs (
    id          bigint generated always as identity primary key,
    queue       text not null default 'bench',
    state       text not null default 'ready',
    payload     jsonb not null default '{}',
    sent        double precision,
    attempts    integer not null default 0,
    created_at  timestamptz not null default now(),
    claimed_at  timestamptz,
    finished_at timestamptz
);
create index raw_jobs_ready_idx on raw_jobs (queue, id) where state = 'ready';
create table raw_steps (
    run_id uuid not null,
    name   text not null,
    output jsonb,
    primary key (run_id, name)
);
"""
PAYLOAD = json.dumps({"args": [], "kwargs": {}})
INSERT_ONE = "insert into raw_jobs (queue, payload) values ('bench', %s::jsonb)"
INSERT_NOTIFY = (
    "with ins as (insert into raw_jobs (queue, payload, sent) values ('bench', %s::jsonb, %s) "
    f"returning id) select pg_notify('{CHANNEL}', id::text) from ins"
)
INSERT_STEP = "insert into raw_steps (run_id, name, output) values (%s, %s, 'null'::jsonb)"
MAX_ROWS_PER_INSERT = 65_000  # one bind parameter per row; the protocol allows 65,535


class RawSystem:
    name = "raw"

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.dbname = settings.database_name(self.name)
        self.dsn = ""
        self.latency_key = settings.key(self.name, "latency")
        self.redis = redis.Redis.from_url(REDIS_URL, socket_timeout=10)
        self._conn: psycopg.Connection[Any] | None = None

    # -- plumbing -------------------------------------------------------------------------
    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The bench's own autocommit connection (resets, fills, counting)."""
        if self._conn is None:
            self._conn = pg.connect(self.dsn)
        return self._conn

    def _reset(self) -> None:
        self.conn.execute("truncate raw_jobs restart identity")

    def _done(self) -> int:
        row = self.conn.execute("select count(*) from raw_jobs where state = 'done'").fetchone()
        return int(row[0]) if row else 0

    def _copy(self, conn: psycopg.Connection[Any], n: int) -> None:
        with conn.cursor() as cur, cur.copy("copy raw_jobs (queue, payload) from stdin") as copy:
            for _ in range(n):
                copy.write_row(("bench", PAYLOAD))

    def _fill(self, n: int) -> None:
        self._reset()
        with pg.connect(self.dsn, autocommit=False) as conn:
            self._copy(conn, n)
            conn.commit()
        self.conn.execute("analyze raw_jobs")

    def _spawn_consumer(self, k: int, *, listen: bool = False) -> Group:
        argv = [sys.executable, "-m", "bench.raw_consumer", "--dsn", self.dsn, "--k", str(k)]
        if listen:
            argv += ["--listen", "--redis-url", REDIS_URL, "--latency-key", self.latency_key]
        return spawn(
            f"raw-k{k}", argv, log_dir=self.log_dir, cwd=PROJECT_ROOT,
            env={"PYTHONPATH": str(PROJECT_ROOT)},
        )  # fmt: skip

    # -- lifecycle ------------------------------------------------------------------------
    def setup(self) -> None:
        self.dsn = pg.create(self.dbname)
        self.conn.execute(SCHEMA)

    def teardown(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.redis.delete(self.latency_key)
        if self.dsn:
            pg.drop(self.dbname)

    def describe(self) -> dict[str, str]:
        return {
            "psycopg": psycopg.__version__,
            "postgres": pg.server_version(),
            "consumer": "k rows per claim statement, done in a 2nd statement, 2 commits/batch",
        }

    # -- cells ----------------------------------------------------------------------------
    def enqueue_one_by_one(self, n: int) -> dict[str, float]:
        """One transaction per row, two ways: autocommit (the INSERT commits itself, one round
        trip, as a pooled autocommit client does) and an explicit COMMIT (two round trips)."""
        out: dict[str, float] = {}
        for label, autocommit in (
            ("INSERT, autocommit (1 round trip)", True),
            ("INSERT + COMMIT (2 round trips)", False),
        ):
            with pg.connect(self.dsn, autocommit=autocommit) as conn:
                for _ in range(cells.WARMUP_ENQUEUES):
                    conn.execute(INSERT_ONE, (PAYLOAD,))
                    conn.commit()  # a no-op under autocommit
                self._reset()
                t0 = time.perf_counter()
                for _ in range(n):
                    conn.execute(INSERT_ONE, (PAYLOAD,))
                    if not autocommit:
                        conn.commit()
                out[label] = n / (time.perf_counter() - t0)
            self._reset()
        return out

    def delay_ceiling(self, n: int) -> dict[str, float]:
        """Celery's own ``noop.delay()``, its message written by one INSERT into ``raw_jobs`` on
        one autocommit connection (``raw_send``): with the flushed commit and with
        ``synchronous_commit=off``, the two send commits of the bridge's ``.delay()`` cell."""
        from .raw_send import RawSend

        sender = RawSend(self.dsn, queue="bench")
        out: dict[str, float] = {}
        try:
            for label, level in ((cells.DELAY_CEILING, "on"), (cells.DELAY_CEILING_OFF, "off")):
                sender.open(synchronous_commit=level)
                out[label] = cells.enqueue_rate(sender.send, n, self._reset)
        finally:
            sender.close()
        return out

    def step_ceiling(self, n: int) -> dict[str, float]:
        """Jobs/s of ``n / STEP_COUNT`` jobs of ``STEP_COUNT`` steps, each step one INSERT into
        ``raw_steps`` committed on its own (flushed), from as many threads as the step target's
        worker has bodies, each on its own autocommit connection (Postgres gathers their
        concurrent commits into shared WAL flushes). No job row, claim or outcome: the ceiling
        of durable steps at that concurrency, beside the bridge's steps and plain jobs."""
        local = threading.local()
        opened: list[psycopg.Connection[Any]] = []

        def run_jobs(count: int) -> None:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = pg.connect(self.dsn)
                opened.append(conn)
            cur = conn.cursor()
            for _ in range(count):
                run_id = uuid.uuid4()
                for step in range(cells.STEP_COUNT):
                    cur.execute(INSERT_STEP, (run_id, f"step-{step}"))

        def reset() -> None:
            self.conn.execute("truncate raw_steps")

        jobs = max(cells.STEP_BODIES[0], n // cells.STEP_COUNT)
        try:
            rate = cells.threaded_rate(run_jobs, jobs, reset, cells.STEP_BODIES[0])
        finally:
            for conn in opened:
                conn.close()
        return {cells.STEP_CEILING: rate}

    def enqueue_producers(self, n: int) -> dict[str, float]:
        """``producers.PRODUCERS`` processes, each an autocommit connection: the bare INSERT
        (the ceiling) and the INSERT with a pg_notify in the same statement."""
        from . import producers

        out: dict[str, float] = {}
        for label, kind in (("INSERT, autocommit", "raw"), ("INSERT + pg_notify", "raw-notify")):
            self._reset()
            out[label] = producers.rate(kind, self.dsn, n)
        self._reset()
        return out

    def _multi_row_insert(self, conn: psycopg.Connection[Any], n: int) -> None:
        left = n
        while left:
            rows = min(left, MAX_ROWS_PER_INSERT)
            values = ", ".join(["('bench', %s::jsonb)"] * rows)
            conn.execute(
                f"insert into raw_jobs (queue, payload) values {values}",
                [PAYLOAD] * rows,
            )
            left -= rows
        conn.commit()

    def enqueue_batched(self, n: int) -> dict[str, float]:
        out: dict[str, float] = {}
        with pg.connect(self.dsn, autocommit=False) as conn:
            self._multi_row_insert(conn, cells.WARMUP_ENQUEUES)
            self._reset()
            t0 = time.perf_counter()
            self._multi_row_insert(conn, n)
            out["multi-row INSERT, 1 txn"] = n / (time.perf_counter() - t0)
            self._reset()
            t0 = time.perf_counter()
            self._copy(conn, n)
            conn.commit()
            out["COPY, 1 txn"] = n / (time.perf_counter() - t0)
        self._reset()
        return out

    def drain(self, n: int, processes: int) -> dict[str, cells.DrainResult]:
        out: dict[str, cells.DrainResult] = {}
        largest = max(self.settings.raw_batch_sizes)
        for k in self.settings.raw_batch_sizes:
            self._fill(n)
            out[f"k={k}, {processes} consumer{'s' if processes > 1 else ''}"] = cells.timed_drain(
                n=n,
                spawn=lambda k=k: [self._spawn_consumer(k) for _ in range(processes)],
                done_count=self._done,
                settings=self.settings,
                report_rss=k == largest,
            )
        self._reset()
        return out

    def idle_latency(self) -> list[float]:
        self._reset()
        self.redis.delete(self.latency_key)
        consumer = self._spawn_consumer(1, listen=True)
        try:
            with pg.connect(self.dsn) as producer:
                return cells.idle_latency(
                    send=lambda sent: producer.execute(INSERT_NOTIFY, (PAYLOAD, sent)),
                    receive=cells.redis_receiver(self.redis, self.latency_key),
                    settings=self.settings,
                    watch=[consumer],
                )
        finally:
            consumer.stop()
            self.redis.delete(self.latency_key)
            self._reset()
