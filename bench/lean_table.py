"""The lean-table cell: N jobs (default 1,000,000) pushed through enqueue -> claim -> settle with
the retention purge running, and what that leaves in ``x_jobs``.

Why it exists: a queue table that bloats gets slower the longer it runs, which no short drain
shows. The procedure, on a server of the bench's own (``private_pg``: autovacuum is a server
setting, and the settings are those the docs recommend unless ``BENCH_LEAN_PG`` says
otherwise):

- a producer thread sends ``client.enqueue_many`` batches of ``BATCH`` no-op jobs, keeping at
  most ``BACKLOG`` jobs enqueued and not yet done (a steady flow, as in production, not a
  pre-filled table);
- ``per_core`` worker processes (``ujobs-bridge worker -c 8``) claim and settle them;
- a purge thread runs the engine's retention pass (``ujobs_bridge._internal.jobs.purge.run_pass``) every
  ``PURGE_EVERY_S`` with ``RETENTION_S`` as the retention, so finished rows are deleted as they
  would be in production, only sooner;
- the bench counts completions (purged + ``done`` rows, under one lock with the purge) and takes
  the time and ``n_dead_tup`` at each tenth of N, the clock starting at the first completion
  (worker start-up is not the table's health): throughput per tenth (with N=1,000,000: per
  100k) should be flat;
- at the end (workers stopped): ``n_tup_upd``, ``n_tup_hot_upd`` (the HOT ratio of updates on
  ``x_jobs``), ``n_dead_tup``, autovacuum runs, the heap and each index's size; then a routine
  ``VACUUM`` of both tables (not FULL) and each index's size again. Sizes include the claim
  table, ``x_job_claimable`` (migration 0019), where the claim index now lives.

What it is not: a drain-rate figure to compare with other systems (the producer competes with
the workers for the two cores), nor a test: it reports, it does not assert.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from . import bridge_cli, lean_sampler, private_pg
from .procs import BenchTimeout, Group, check_alive

BATCH = 1000
BACKLOG = 2_000
RETENTION_S = 5.0
PURGE_EVERY_S = 1.0
POLL_S = 0.25
SEGMENTS = 10
# What the docs' "Table health" page recommends for the server (per-table settings come
# with the schema, migration 0012).
RECOMMENDED: dict[str, str] = {"autovacuum_naptime": "1s"}
CLAIM_INDEX = "x_job_claimable_claim_idx"  # on the claim table (migration 0019)
TABLES = ("x_jobs", "x_job_claimable")  # sized at the end, then vacuumed and sized again


@dataclass
class LeanResult:
    jobs: int
    seconds: float
    segment_rates: list[float]  # jobs/s per tenth of N, in order
    segment_dead: list[int]  # n_dead_tup at the end of each tenth
    table: dict[str, int]  # pg_stat_user_tables figures at the end
    sizes: dict[str, int]  # relation -> bytes at the end (heap: x_jobs)
    sizes_vacuumed: dict[str, int]  # the same after a routine VACUUM
    server: dict[str, str] = field(default_factory=dict)

    @property
    def hot_ratio(self) -> float:
        upd = self.table.get("n_tup_upd", 0)
        return self.table.get("n_tup_hot_upd", 0) / upd if upd else float("nan")

    @property
    def last_vs_first(self) -> float:
        rates = self.segment_rates
        return rates[-1] / rates[0] if len(rates) >= 2 and rates[0] else float("nan")

    def summary(self) -> str:
        mib = 1024 * 1024
        rates = ", ".join(f"{r:,.0f}" for r in self.segment_rates)
        sizes = ", ".join(
            f"{k} {self.sizes[k] / mib:.2f}->{self.sizes_vacuumed.get(k, 0) / mib:.2f}"
            for k in self.sizes
        )
        return (
            f"{self.jobs:,} jobs in {self.seconds:.0f}s; jobs/s per tenth: {rates} "
            f"(last/first x{self.last_vs_first:.2f}); HOT {self.hot_ratio:.1%} of "
            f"{self.table.get('n_tup_upd', 0):,} updates; dead tuples per tenth "
            f"{self.segment_dead}, at end {self.table.get('n_dead_tup', 0):,}; autovacuums "
            f"{self.table.get('autovacuum_count', 0)} (x_job_claimable "
            f"{self.table.get('claimable_autovacuum_count', 0)}); MiB end->after VACUUM: {sizes}"
        )


def _dsn(admin_dsn: str, dbname: str) -> str:
    return admin_dsn.replace("dbname=postgres", f"dbname={dbname}")


def _url(admin_dsn: str, dbname: str) -> str:
    parts = dict(p.split("=", 1) for p in admin_dsn.split())
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{dbname}"


class _Counter:
    """Completions = rows the purge removed + ``done`` rows still there, read under one lock so
    a row is never counted twice (before and after its delete)."""

    def __init__(self, conn: psycopg.Connection[Any], queue: str) -> None:
        self.conn = conn
        self.queue = queue
        self.purged = 0
        self.lock = threading.Lock()

    def done(self) -> int:
        with self.lock:
            return self.purged + bridge_cli.done_count(self.conn, self.queue)


def _stats(conn: psycopg.Connection[Any]) -> dict[str, int]:
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_live_tup, n_dead_tup,"
        " autovacuum_count, vacuum_count,"
        " (select c.autovacuum_count from pg_stat_user_tables as c"
        "   where c.relname = 'x_job_claimable')"
        " from pg_stat_user_tables where relname = 'x_jobs'"
    ).fetchone()
    names = ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del", "n_live_tup",
             "n_dead_tup", "autovacuum_count", "vacuum_count",
             "claimable_autovacuum_count")  # fmt: skip
    return dict(zip(names, (int(v or 0) for v in row or ()), strict=False))


def _sizes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """x_jobs, the claim table (``x_job_claimable``, migration 0019) and their indexes."""
    rows = conn.execute(
        "select c.relname, pg_relation_size(c.oid) from pg_class c"
        " where c.oid = any(%(tables)s::regclass[])"
        " or c.oid in (select indexrelid from pg_index"
        " where indrelid = any(%(tables)s::regclass[]))"
        " order by c.relkind desc, c.relname",
        {"tables": list(TABLES)},
    ).fetchall()
    return {str(name): int(size) for name, size in rows}


def run(n: int, *, processes: int, log_dir: Path, settings: dict[str, str],
        deadline_s: float) -> LeanResult:  # fmt: skip
    """The whole cell on a private server: see the module docstring."""
    from ujobs_bridge import connect
    from ujobs_bridge._internal.clock import SYSTEM_CLOCK
    from ujobs_bridge._internal.jobs.purge import cutoff_for, run_pass

    from .ujobs_tasks import QUEUE, noop

    with private_pg.cluster(settings) as admin:
        with psycopg.connect(admin, autocommit=True) as a:
            a.execute(sql.SQL("create database {}").format(sql.Identifier("lean")))
            server = {
                str(k): str(v)
                for k, v in a.execute(
                    "select name, setting from pg_settings where name like 'autovacuum%%'"
                    " or name in ('server_version', 'shared_buffers')"
                ).fetchall()
            }
        url = _url(admin, "lean")
        bridge_cli.upgrade(url)
        conn = psycopg.connect(_dsn(admin, "lean"), autocommit=True)
        purge_conn = psycopg.connect(_dsn(admin, "lean"), autocommit=True)
        client = connect(url, upgrade=False)
        counter = _Counter(conn, QUEUE)
        stop = threading.Event()
        failures: list[BaseException] = []
        sent = [0]

        def produce() -> None:
            try:
                while sent[0] < n and not stop.is_set():
                    if sent[0] - counter.done() >= BACKLOG:
                        time.sleep(0.005)
                        continue
                    k = min(BATCH, n - sent[0])
                    client.enqueue_many([noop.call() for _ in range(k)])
                    sent[0] += k
            except BaseException as exc:
                failures.append(exc)

        def purge() -> None:
            try:
                while not stop.wait(PURGE_EVERY_S):
                    with counter.lock:
                        cutoff = cutoff_for(purge_conn, SYSTEM_CLOCK, RETENTION_S)
                        counter.purged += run_pass(purge_conn, cutoff).get("x_jobs", 0)
            except BaseException as exc:
                failures.append(exc)

        groups: list[Group] = []
        sample_to = os.environ.get("BENCH_LEAN_SAMPLE")  # opt-in: see lean_sampler
        sampler = (
            lean_sampler.Sampler(_dsn(admin, "lean"), Path(sample_to), CLAIM_INDEX)
            if sample_to
            else None
        )
        if sampler is not None:
            sampler.start()
        threads = [threading.Thread(target=f, daemon=True) for f in (produce, purge)]
        marks: list[tuple[float, int]] = []
        dead: list[int] = []
        try:
            for t in threads:
                t.start()
            groups = [
                bridge_cli.spawn_worker(f"lean-worker-{i}", dsn=url, tasks="bench.ujobs_tasks",
                                        queue=QUEUE, log_dir=log_dir)
                for i in range(processes)
            ]  # fmt: skip
            step = max(n // SEGMENTS, 1)
            t0 = time.perf_counter()
            while (first := counter.done()) == 0:  # worker start-up is not the table's health
                time.sleep(0.02)
                check_alive(groups)
                if time.perf_counter() - t0 > deadline_s:
                    raise BenchTimeout("lean table: no job done")
            marks.append((time.perf_counter(), first))
            while marks[-1][1] < n:
                time.sleep(POLL_S)
                if failures:
                    raise failures[0]
                check_alive(groups)
                if time.perf_counter() - t0 > deadline_s:
                    raise BenchTimeout(
                        f"lean table: {counter.done():,} of {n:,} after {deadline_s:.0f}s"
                    )
                done = counter.done()
                while done >= len(marks) * step and len(marks) <= SEGMENTS:
                    marks.append((time.perf_counter(), done))
                    dead.append(_stats(conn).get("n_dead_tup", 0))
            seconds = time.perf_counter() - t0
        finally:
            stop.set()
            for group in groups:
                group.stop()
            for t in threads:
                t.join(timeout=30)
            client.close()
            if sampler is not None:
                sampler.stop()
        time.sleep(1.5)  # backends flush their table statistics on exit / at most every second
        table = _stats(conn)
        sizes = _sizes(conn)
        conn.execute("vacuum x_jobs, x_job_claimable")
        sizes_vacuumed = _sizes(conn)
        conn.close()
        purge_conn.close()
    rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(marks) if b[0] > a[0]]
    return LeanResult(n, seconds, rates, dead, table, sizes, sizes_vacuumed, server)
