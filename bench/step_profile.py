"""In-process profile of durable steps: where a ``step.run`` of a no-op spends its time and CPU.

Why it exists: the step-overhead cell (``bench.cells``, ``--cells steps``) gives a rate through a
real worker, which mixes the step path with claiming, settling and the machine's load. This runs
``--bodies`` threads, each taking jobs of ``--steps`` no-op ``step.run`` calls one after the
other, all sharing ONE ``GroupCommit`` on a pool of ``bodies + 1`` connections (what a worker at
``-c bodies`` does), against a temporary database, and prints per step: the process CPU, the
thread context switches, and, beside each other, how long one batch statement took (its durable
commit included) and how long a body waited per step. When the two are close, a body's steps are
bound by the commit's latency (``bodies / statement time`` steps a second at best), not by CPU.

    python -m bench.step_profile --bodies 8 --jobs 400 [--profile]

What it is not: a cell of the bench report (no ratio, no target) or a test.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import queue
import statistics
import threading
import time
import uuid
from typing import Any

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db import testing as testing_db
from ujobs_bridge._internal.db.connections import Role
from ujobs_bridge._internal.db.steps import Lease
from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.jobs.group_commit import IN_FLIGHT, GroupCommit
from ujobs_bridge.steps import StepRunner, bind, step, unbind
from ujobs_bridge.testing import TemporaryDatabase


def _nothing() -> None:
    return None


def _switches() -> int:
    """Context switches of the calling thread so far (Linux)."""
    total = 0
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as status:
        for line in status:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def _running_jobs(db: psycopg.Connection[Any], n: int) -> list[Lease]:
    specs = [
        enqueue_db.EnqueueSpec(
            id=uuid.uuid4(),
            name="profile.steps",
            queue="profile",
            input_json='{"args": [], "kwargs": {}}',
            max_attempts=3,
        )
        for _ in range(n)
    ]
    leases = []
    for enqueued in enqueue_db.job_enqueue_many(db, specs, None):
        claim = testing_db.ClaimById(
            id=enqueued.id, token=uuid.uuid4(), lease_s=3600, worker="profile", now=None
        )
        claimed = testing_db.job_claim_by_id(db, claim)
        assert claimed is not None
        leases.append(Lease(claimed.id, claimed.lease_token, claimed.attempt))
    return leases


class _TimedCommit(GroupCommit):
    """The group commit, with each batch statement's duration kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.durations: list[float] = []

    def _statement(self, batch: Any) -> Any:
        started = time.perf_counter()
        try:
            return super()._statement(batch)
        finally:
            self.durations.append(time.perf_counter() - started)


def run(bodies: int, jobs: int, steps: int, profile: bool, in_flight: int = IN_FLIGHT) -> str:
    with (
        TemporaryDatabase(prefix="ujb_step_profile") as database,
        psycopg.connect(database.dsn, autocommit=True) as db,
    ):
        work: queue.SimpleQueue[Lease] = queue.SimpleQueue()
        for lease in _running_jobs(db, jobs):
            work.put(lease)
        pool = connections.pool(database.dsn, Role("bench:steps"), max_size=bodies + 1)
        commits = _TimedCommit(pool.connection, in_flight=in_flight)
        with pool.connection():
            pass  # one connection open before the clock starts
        switched: list[int] = []
        profiles: list[cProfile.Profile] = []

        def body() -> None:
            profiler = cProfile.Profile() if profile else None
            if profiler is not None:
                profiles.append(profiler)
                profiler.enable()
            before = _switches()
            while True:
                try:
                    lease = work.get_nowait()
                except queue.Empty:
                    break
                runner = StepRunner(
                    lease=lease,
                    connection=pool.connection,
                    signal=AttemptSignal(),
                    clock=SYSTEM_CLOCK,
                    commits=commits,
                    fresh=True,
                )
                token = bind(runner)
                try:
                    for i in range(steps):
                        step.run(f"s{i}", _nothing)
                finally:
                    unbind(token)
            switched.append(_switches() - before)
            if profiler is not None:
                profiler.disable()

        threads = [threading.Thread(target=body) for _ in range(bodies)]
        cpu, wall = time.process_time(), time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        pool.close()
        n = jobs * steps
        row = db.execute("select count(*) from x_job_steps where status = 'completed'")
        stored = row.fetchone()
        assert stored is not None and stored[0] == n, f"{stored} of {n} steps stored"
    lines = [
        f"{bodies} bodies, {n} steps, {in_flight} in flight, load {os.getloadavg()[0]:.1f}: "
        f"{n / wall:,.0f} steps/s, CPU {cpu / n * 1e6:.0f} us/step, "
        f"{sum(switched) / n:.2f} context switches/step, "
        f"{commits.results / max(1, commits.statements):.2f} results/statement",
        f"  batch statement (its commit included): {_ms(commits.durations)}; "
        f"a body's time per step: {wall * bodies / n * 1e3:.2f} ms",
    ]
    if profiles:
        stats = pstats.Stats(profiles[0])
        for more in profiles[1:]:
            stats.add(more)
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats("tottime").print_stats(25)
        lines.append(out.getvalue())
    return "\n".join(lines)


def _ms(durations: list[float]) -> str:
    if not durations:
        return "n/a"
    median, mean = statistics.median(durations), statistics.fmean(durations)
    return f"median {median * 1e3:.2f} ms, mean {mean * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.step_profile", description=__doc__)
    parser.add_argument("--bodies", type=int, default=8, help="threads sharing one group commit")
    parser.add_argument("--jobs", type=int, default=400, help="jobs in all")
    parser.add_argument("--steps", type=int, default=5, help="no-op step.run calls per job")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT, help="batches written at once")
    parser.add_argument("--profile", action="store_true", help="cProfile the bodies' threads")
    args = parser.parse_args()
    print(run(args.bodies, args.jobs, args.steps, args.profile, args.in_flight))


if __name__ == "__main__":
    main()
