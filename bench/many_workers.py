"""The many-workers cell: N no-op jobs drained by 1, 2, 4, 8, 16 and 32 worker processes.

Why it exists: a SKIP LOCKED queue can collapse under contention as processes are added, and
a deployment leaving Celery runs dozens of worker processes against one primary, behind
PgBouncer. The procedure, for each layout (``one queue``: N jobs in queue ``bench``;
``8 queues``: N jobs spread round-robin over ``bench_0`` .. ``bench_7``, every worker serving
all eight) and each process count P:

- N no-op jobs are enqueued (``enqueue_many``) into the ujobs system's database, then ``ANALYZE``;
- P ``ujobs-bridge worker -c 8`` processes are spawned; from ``BOUNCER_FROM`` processes on they
  connect through a real PgBouncer in transaction mode (``ujobs_bridge.testing.PgBouncer``,
  ``--pgbouncer``) with a direct LISTEN connection (``--listen-dsn``), below that directly;
- the clock (``cells.timed_drain``) runs from the spawn to the N-th ``done`` row, so start-up
  is in the figure (the rate from the first completion on is reported beside it);
- a sampler thread reads the database's backends in ``pg_stat_activity`` every ``SAMPLE_S``,
  counting only those that appeared after the spawn (the bench's own sessions and a previous
  point's excluded; PgBouncer's server connections included, a fresh PgBouncer per point): the
  maximum is the "server connections" figure;
- the same thread also reads, in the bench's database, how many worker nodes (``x_worker_nodes``,
  registered by each worker as it starts) appeared since the spawn, and the ``done`` count: from
  the instant all P are registered to the N-th ``done`` row, the rate of the jobs done in that
  window is the "all up" figure (the fleet's throughput without its start-up, which on a few
  cores is most of a small drain: 32 interpreters importing the engine). It is left out (NaN)
  when less than a tenth of the jobs were left by then;
- at the end, from the ``x_jobs`` rows: done / not done / dead / redelivered counts (``no lost
  job``: done = N, nothing dead, nothing delivered twice), and the pick-up figures. A settle
  clears the claim's lease columns, so the claim instant is not on the row any more: the
  pick-up is ``finished_at - run_at`` of each job, i.e. claim minus run_at plus the no-op body
  and the settle (a few ms). Every job is due at its enqueue, so with a backlog of N this is
  mostly the time a job waited behind the others (p50 is about N / 2 / rate + start-up).

What it is not: an idle pick-up latency (the ``latency`` cell measures that), nor a multi-host
figure: all processes share this machine's cores with the server, which caps throughput well
before Postgres contention does on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from . import bridge_cli, cells, pg
from .procs import Group
from .settings import Settings

COUNTS = (1, 2, 4, 8, 16, 32)
QUEUES = 8
BOUNCER_FROM = 8  # process counts from this one on go through PgBouncer
BOUNCER_POOL = 20  # PgBouncer's default_pool_size: server connections it may open per database
SAMPLE_S = 0.05
ONE, MANY = "one queue", f"{QUEUES} queues"
LAYOUTS = (ONE, MANY)


@dataclass(frozen=True)
class ScalePoint:
    layout: str
    processes: int
    bouncer: bool
    drain: cells.DrainResult
    pickup_p50_ms: float
    pickup_p99_ms: float
    server_connections: int  # max backends of the database seen during the drain
    done: int
    not_done: int
    dead: int
    redelivered: int
    all_up_rate: float = float("nan")  # jobs/s from all P nodes registered to the N-th done

    @property
    def clean(self) -> bool:
        """No error and no lost job: every job done once, none dead, none delivered twice."""
        return self.done == self.drain.jobs and not (self.not_done or self.dead or self.redelivered)

    def summary(self) -> str:
        via = "PgBouncer" if self.bouncer else "direct"
        return (
            f"{self.processes} proc ({via}): {self.drain.rate:,.0f} jobs/s "
            f"(1st→Nth {self.drain.steady_rate:,.0f}, all up {self.all_up_rate:,.0f}), "
            f"pick-up p50 {self.pickup_p50_ms:,.0f} ms "
            f"p99 {self.pickup_p99_ms:,.0f} ms, server connections {self.server_connections}, "
            f"done {self.done:,}/{self.drain.jobs:,}, dead {self.dead}, "
            f"redelivered {self.redelivered}"
        )


def queue_names(layout: str) -> list[str]:
    from .ujobs_tasks import QUEUE

    return [QUEUE] if layout == ONE else [f"{QUEUE}_{i}" for i in range(QUEUES)]


class _ConnectionSampler:
    """Max backends of ``dbname`` in ``pg_stat_activity`` (this sampler's own excluded), and the
    "all up" rate: jobs done per second from the instant ``processes`` nodes have registered."""

    def __init__(self, dbname: str, processes: int = 0, jobs: int = 0) -> None:
        self.dbname = dbname
        self.processes = processes
        self.jobs = jobs
        self.peak = 0
        self._stop = threading.Event()
        self._conn = pg.connect(pg.dsn_for("postgres"))
        self._jobs_conn = pg.connect(pg.dsn_for(dbname))
        self._since: Any = None  # the database's clock at the spawn: nodes started after it
        self._up: tuple[float, int] | None = None  # (perf_counter, done) once all are up
        self._before: set[int] = set()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def all_up_rate(self, end: float) -> float:
        """Jobs/s from all nodes up to ``end`` (``perf_counter`` of the N-th done); NaN if under
        a tenth of the jobs were left then."""
        if self._up is None:
            return float("nan")
        at, done = self._up
        left, span = self.jobs - done, end - at
        return left / span if left >= self.jobs / 10 and span > 0 else float("nan")

    def _watch_jobs(self) -> None:
        if self._up is not None or not self.processes:
            return
        row = self._jobs_conn.execute(
            "select (select count(*) from x_worker_nodes where started_at >= %s),"
            " (select count(*) from x_jobs where state = 'done')",
            (self._since,),
        ).fetchone()
        assert row is not None
        if int(row[0]) >= self.processes:
            self._up = (time.perf_counter(), int(row[1]))

    def _pids(self) -> set[int]:
        rows = self._conn.execute(
            "select pid from pg_stat_activity where datname = %s and pid <> pg_backend_pid()",
            (self.dbname,),
        ).fetchall()
        return {int(r[0]) for r in rows}

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.peak = max(self.peak, len(self._pids() - self._before))
            self._watch_jobs()

    def __enter__(self) -> _ConnectionSampler:
        # The bench's own sessions (and a previous point's, still closing) are not this
        # point's: only backends that appear after this instant are counted.
        self._before = self._pids()
        row = self._jobs_conn.execute("select now()").fetchone()
        assert row is not None
        self._since = row[0]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._conn.close()
        self._jobs_conn.close()


@contextlib.contextmanager
def bouncer() -> Iterator[Any]:
    """A transaction-mode PgBouncer in front of the bench's server (the shared one)."""
    from ujobs_bridge.testing import PgBouncer

    parts = dict(p.split("=", 1) for p in pg.dsn_for("postgres").split())
    with PgBouncer(parts["host"], int(parts["port"]), pool_size=BOUNCER_POOL) as b:
        yield b


def _fill(client: Any, conn: psycopg.Connection[Any], n: int, layout: str) -> None:
    from .ujobs_tasks import noop

    names = queue_names(layout)
    calls = [noop.configure(queue=q) for q in names]
    pg.empty_jobs(conn)
    batch = 5_000
    for start in range(0, n, batch):
        client.enqueue_many(
            [calls[i % len(calls)].call() for i in range(start, min(n, start + batch))]
        )
    conn.execute("analyze x_jobs")


def _rows(conn: psycopg.Connection[Any]) -> tuple[int, int, int, int, float, float]:
    """done, not done, dead, redelivered, pick-up p50 and p99 (ms) of every job."""
    row = conn.execute(
        "select count(*) filter (where state = 'done'),"
        " count(*) filter (where state not in ('done', 'dead')),"
        " count(*) filter (where state = 'dead'),"
        " count(*) filter (where deliveries > 1),"
        " percentile_cont(0.5) within group (order by extract(epoch from finished_at - run_at)),"
        " percentile_cont(0.99) within group (order by extract(epoch from finished_at - run_at))"
        " from x_jobs"
    ).fetchone()
    assert row is not None
    p50, p99 = (float(v) * 1000.0 if v is not None else float("nan") for v in row[4:6])
    return int(row[0]), int(row[1]), int(row[2]), int(row[3]), p50, p99


def run(
    *,
    client: Any,
    conn: psycopg.Connection[Any],
    dbname: str,
    url: str,
    n: int,
    counts: Sequence[int],
    settings: Settings,
    log_dir: Path,
) -> list[ScalePoint]:
    """Every (layout, count) point: see the module docstring. The database is left empty."""
    points: list[ScalePoint] = []
    for layout in LAYOUTS:
        names = queue_names(layout)
        for processes in counts:
            via = processes >= BOUNCER_FROM
            # A fresh PgBouncer per point: its idle server connections die with it, so they
            # never count in the next point's figure.
            with bouncer() if via else contextlib.nullcontext() as b:
                extra = ["--pgbouncer", "--listen-dsn", url] if via else []
                dsn = b.dsn(dbname) if b is not None else url

                def spawn(
                    p: int = processes, d: str = dsn, x: list[str] = extra, q: str = ",".join(names)
                ) -> list[Group]:
                    return [
                        bridge_cli.spawn_worker(f"scale-worker-{i}", dsn=d,
                                                tasks="bench.ujobs_tasks", queue=q,
                                                log_dir=log_dir, extra=x)
                        for i in range(p)
                    ]  # fmt: skip

                def done() -> int:
                    row = conn.execute("select count(*) from x_jobs where state = 'done'")
                    return int(next(iter(row.fetchone() or (0,))))

                _fill(client, conn, n, layout)
                with _ConnectionSampler(dbname, processes, n) as sampler:
                    start = time.perf_counter()  # timed_drain's clock starts here too
                    drain = cells.timed_drain(
                        n=n, spawn=spawn, done_count=done, settings=settings, report_rss=False
                    )
                all_up = sampler.all_up_rate(start + drain.seconds)
                ok, open_, dead, again, p50, p99 = _rows(conn)
                points.append(
                    ScalePoint(layout, processes, via, drain, p50, p99, sampler.peak, ok, open_,
                               dead, again, all_up)
                )  # fmt: skip
    pg.empty_jobs(conn)
    return points
