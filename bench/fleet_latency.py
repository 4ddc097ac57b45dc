"""The idle-fleet cell: one job at a time into an idle fleet of 1, 8 and 32 worker processes.

Why it exists: most jobs arrive at an idle fleet, and a fleet is more than one worker. An insert
must wake one of them, not all: a notification every idle worker hears makes each of them claim,
and all but one find nothing (claims per job grow with the fleet), or, damped by a pause after an
empty claim, costs the next pick-up that pause. This cell measures both at once, for each fleet
size P in ``SIZES``:

- P ``ujobs-bridge worker -c 8`` processes serve queue ``bench``; from ``BOUNCER_FROM``
  processes on they connect through a real PgBouncer in transaction mode with a direct LISTEN
  connection (``--listen-dsn``), as a large fleet is deployed (a smaller one directly);
- once every worker has marked the queue as waited for (``x_queue_waiters``: it is idle and
  listening), the claim counters every worker writes into its node row at each beat are read;
- ``cells.idle_latency`` sends one job at a time (the same procedure as the one-worker
  ``latency`` cell: ``time.time()`` before the send, the body's ``time.time()`` back through
  Redis, a gap between jobs);
- once every node has beaten again, the counters are read again: claims per job and empty
  claims per job are the fleet's claim passes (and those that found nothing) over the jobs sent;
  hand-offs per job, the jobs an insert claimed for an idle worker itself (migration 0027: no
  claim pass at all).

The workers poll every ``POLL_S`` (longer than a point lasts), so the counts are the wake-ups'
and the claims that come with each job's outcome, not the polls'.

What it is not: the one-worker ``latency`` cell beside Celery (that is where the ratio to Celery
is taken), nor a drain (``scale`` drains a backlog with the same fleet sizes).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from . import bridge_cli, cells, pg
from .many_workers import bouncer
from .procs import BenchTimeout, Group
from .settings import Settings

SIZES = (1, 8, 32)
BOUNCER_FROM = 32  # fleets this large connect through PgBouncer (a direct listen beside it)
POLL_S = 120.0  # the workers' --poll: no poll falls inside a point, so claims are wake-ups
LEASE_S = 6.0  # --lease: a beat every 2 s, so the counters are read soon after the samples
IDLE_TIMEOUT_S = 180.0  # 32 interpreters start on a few cores: generous


@dataclass(frozen=True)
class FleetPoint:
    workers: int
    bouncer: bool
    samples_ms: list[float]
    jobs: int  # jobs sent (warm-ups included): the divisor of the claim counts
    claims: int
    empty_claims: int
    hand_offs: int = 0  # jobs the inserts claimed for an idle worker (migration 0027)

    @property
    def p50(self) -> float:
        return cells.percentile(self.samples_ms, 50)

    @property
    def p99(self) -> float:
        return cells.percentile(self.samples_ms, 99)

    @property
    def claims_per_job(self) -> float:
        return self.claims / self.jobs if self.jobs else float("nan")

    @property
    def hand_offs_per_job(self) -> float:
        return self.hand_offs / self.jobs if self.jobs else float("nan")

    @property
    def empty_per_job(self) -> float:
        return self.empty_claims / self.jobs if self.jobs else float("nan")

    def summary(self) -> str:
        via = "PgBouncer + direct listen" if self.bouncer else "direct"
        return (
            f"{self.workers} idle worker(s) ({via}): p50 {self.p50:.2f} ms, p99 {self.p99:.2f} ms, "
            f"{self.claims_per_job:.2f} claims a job ({self.empty_per_job:.2f} empty), "
            f"{self.hand_offs_per_job:.2f} hand-offs a job (n={len(self.samples_ms)})"
        )


def _wait(what: str, check: Callable[[], bool], groups: Sequence[Group]) -> None:
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while not check():
        for group in groups:
            if group.exited() is not None:
                raise BenchTimeout(f"{group.name} died; last lines:\n{group.log_tail()}")
        if time.monotonic() > deadline:
            raise BenchTimeout(f"fleet: {what} not within {IDLE_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


def _scalar(conn: psycopg.Connection[Any], query: Any, params: Sequence[Any] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _waiting(conn: psycopg.Connection[Any], queue: str) -> int:
    """How many workers marked ``queue`` as waited for: idle, listening workers."""
    return int(_scalar(conn, "select count(*) from x_queue_waiters where queue = %s", (queue,)))


def _counters(
    conn: psycopg.Connection[Any], groups: Sequence[Group], workers: int
) -> tuple[int, int, int]:
    """Every node's claim and hand-off counters, once each node has beaten after this
    instant."""
    since = _scalar(conn, "select now()")
    _wait(
        "a beat of every worker",
        lambda: (
            _scalar(conn, "select count(*) from x_worker_nodes where heartbeat_at > %s", (since,))
            >= workers
        ),
        groups,
    )
    row = conn.execute(
        "select coalesce(sum((info ->> 'claims')::bigint), 0),"
        " coalesce(sum((info ->> 'empty_claims')::bigint), 0),"
        " coalesce(sum((info ->> 'hand_offs')::bigint), 0) from x_worker_nodes"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def run(
    *,
    conn: psycopg.Connection[Any],
    dbname: str,
    url: str,
    env: dict[str, str],
    send: Callable[[float], object],
    receive: Callable[[float, float], float],
    settings: Settings,
    log_dir: Path,
    sizes: Sequence[int] = SIZES,
) -> list[FleetPoint]:
    """Every fleet size's point (see the module docstring); the job table is left empty."""
    from .ujobs_tasks import QUEUE

    points: list[FleetPoint] = []
    for workers in sizes:
        via = workers >= BOUNCER_FROM
        pg.empty_jobs(conn)
        with bouncer() if via else contextlib.nullcontext() as b:
            extra = ["--poll", str(POLL_S), "--lease", str(LEASE_S)]
            if b is not None:
                extra += ["--pgbouncer", "--listen-dsn", url]
            dsn = b.dsn(dbname) if b is not None else url
            groups = [
                bridge_cli.spawn_worker(f"fleet-worker-{i}", dsn=dsn, tasks="bench.ujobs_tasks",
                                        queue=QUEUE, log_dir=log_dir, env=env, extra=extra)
                for i in range(workers)
            ]  # fmt: skip
            try:
                _wait(
                    "every worker idle and listening",
                    lambda size=workers: _waiting(conn, QUEUE) >= size,
                    groups,
                )
                claims0, empty0, hands0 = _counters(conn, groups, workers)
                samples = cells.idle_latency(
                    send=send, receive=receive, settings=settings, watch=groups
                )
                claims1, empty1, hands1 = _counters(conn, groups, workers)
            finally:
                for group in groups:
                    group.stop()
        jobs = settings.latency_warmup + settings.latency_samples
        points.append(
            FleetPoint(
                workers, via, samples, jobs, claims1 - claims0, empty1 - empty0, hands1 - hands0
            )
        )
    pg.empty_jobs(conn)
    return points
