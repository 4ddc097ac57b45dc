"""The cells every system is measured in, and the three procedures they share.

Why it exists: an enqueue rate, a drain rate or a pick-up latency is only comparable across
systems if it is measured the same way. So the clock placement lives here, once:

- ``enqueue_rate``: ``WARMUP_ENQUEUES`` sent and cleared away first; the clock runs around the
  ``n`` sends only; what they enqueued is cleared afterwards (every enqueue-shaped cell).
- the many-producers cell (``ProducerCells``, ``producers.py``): ``PRODUCERS`` processes send
  N jobs together, one commit each, timed from a common start to the last one's end.
- ``timed_drain``: jobs are already enqueued; the clock starts just before the worker
  process(es) are spawned and stops when the bench sees the N-th completion (polled every
  ``poll_s``). Worker start-up is therefore part of the figure; the rate from the first completion
  to the N-th is reported beside it so start-up cost can be told apart. RSS of the worker
  process groups is sampled throughout (start = at the first completion, end = at the N-th).
- ``idle_latency``: one job at a time into an idle worker, ``time.time()`` taken just before
  the enqueue call and echoed back by the job body (its first line), after warm-ups, with a
  ``latency_gap_s`` gap between jobs.
- the step-overhead cell (ujobs-bridge only, ``StepCells``): two ``timed_drain`` runs back to
  back on the same worker settings, N plain no-op jobs and N jobs of 5 no-op ``step.run``
  calls; the figure that matters is the ratio of the two rates within one round. The pair runs
  at each ``-c`` of ``STEP_BODIES``: ``-c 8`` (the target), ``-c 16`` (more bodies whose steps
  share a commit) and ``-c 1`` on N/10 jobs, whose difference per step is what one lone
  ``step.run`` costs (its latency: nothing to share a commit with).
- the Celery-shaped cells (``CeleryShaped``: real Celery and celery_compat on the bridge, the
  same procedure on both sides): ``.delay()`` of a no-op one by one (on the bridge each one a
  durable commit, and again with ``ujobs_send_commit="off"``: each returns before the WAL
  flush); ``.delay()`` from concurrent senders (``SENDER_THREADS`` threads of one process
  sharing its app, timed from their common start to the last one's end by
  ``threaded_rate``; and ``producers.PRODUCERS`` processes, ``producers.py``), on the bridge
  with both send commits; ``.delay()`` in blocks of ``TX_SIZE`` (on the bridge inside
  ``celery_compat.enqueue_in(conn)`` and one commit per block; Celery has no transaction, so
  its figure is its plain rate for the same calls); a ``timed_drain`` of N pre-enqueued no-op
  ``@shared_task`` messages (the bridge: ONE worker process; Celery: ``prefork -c 2``). Results
  are ignored on both sides (``task_ignore_result=True``).
- the lean-table cell (ujobs-bridge only, ``LeanCells``, first round only): ``--lean-jobs``
  jobs (default 1,000,000) through enqueue -> claim -> settle on a private server with the purge
  running; throughput per tenth, the HOT ratio, dead tuples and sizes (``lean_table``).
- the dashboard cell (ujobs-bridge only, ``DashboardCells``, first round only): a fresh database
  filled with ``--dashboard-rows`` jobs (default 1,000,000), the real dashboard served, each
  page (overview, jobs list and its filters, the next page, one job) timed; median and p95 in
  ms against the 200 ms target (``dashboard_bench``).
- the migrate cell (``BrokerDrain``, ``migrate_system``): N messages real Celery published to
  Redis and to RabbitMQ, each backlog drained by the ``ujobs-bridge migrate`` CLI (a
  subprocess) into a fresh database; spawn -> exit, the drainer's own clock, and its RSS.

What it is not: any system's code. Systems pass in how to spawn, count, send and receive.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import redis

from . import machine_cpu
from .drain_result import DrainResult as DrainResult
from .drain_result import MigrateResult as MigrateResult
from .lean_table import LeanResult
from .procs import BenchTimeout, Group, RssSampler, wait_until
from .settings import Settings

if TYPE_CHECKING:
    from .dashboard_bench import DashboardResult
    from .fleet_latency import FleetPoint
    from .many_workers import ScalePoint

ENQ_ONE = "enqueue, one-by-one"
ENQ_BATCH = "enqueue, batched"
ENQ_PRODUCERS = "enqueue, 8 producer processes at once, one commit per job"
DRAIN_1 = "drain, 1 worker process"
DRAIN_CORE = "drain, 1 worker process per core"
LATENCY = "idle pick-up latency"
FLEET_LATENCY = "idle pick-up latency, idle fleets of 1, 8 and 32 workers"
RSS_1 = "worker RSS, 1-process drain"
RSS_CORE = "worker RSS, per-core drain"
STEPS = "step overhead: drain, plain job vs 5 no-op steps"
TX_SIZE = 1000
DELAY_ONE = "Celery-shaped: .delay() one by one"
# The raw system's figures in that cell (``raw_send``: Celery's own send, its message one INSERT).
DELAY_CEILING = ".delay(), its message one INSERT (each one a commit)"
DELAY_CEILING_OFF = ".delay(), its message one INSERT, synchronous_commit=off"
SENDER_THREADS = 8  # the threads of one (web) process sending at once
DELAY_MANY = "Celery-shaped: .delay() from concurrent senders, one message each"
DELAY_TX = f"Celery-shaped: {TX_SIZE:,} .delay() in one transaction"
DRAIN_SHARED = "Celery-shaped: drain no-op @shared_task"
CELERY_SHAPED = (DELAY_ONE, DELAY_MANY, DELAY_TX, DRAIN_SHARED)
CELERY_PREFORK = 2  # the Celery drain the bridge's one-process drain is held against
MIGRATE = "migrate: drain a Celery backlog into Postgres"
RSS_MIGRATE = "migrate: drainer RSS"
LEAN = "lean table: N jobs through enqueue -> claim -> settle, purge running"
SCALE = "many workers: 1..32 worker processes, one queue and 8 queues"
DASHBOARD = "dashboard: page times with N rows in x_jobs"
CELLS = (
    ENQ_ONE, ENQ_BATCH, ENQ_PRODUCERS, DRAIN_1, DRAIN_CORE, LATENCY, FLEET_LATENCY, RSS_1,
    RSS_CORE, STEPS, *CELERY_SHAPED, MIGRATE, RSS_MIGRATE, LEAN, SCALE, DASHBOARD,
)  # fmt: skip
# ``--cells`` names. A drain cell brings its RSS cell with it (both come from the same drain).
SELECTABLE = {
    "enqueue-one": ENQ_ONE,
    "enqueue-batch": ENQ_BATCH,
    "enqueue-producers": ENQ_PRODUCERS,
    "drain-1": DRAIN_1,
    "drain-core": DRAIN_CORE,
    "latency": LATENCY,
    "fleet-latency": FLEET_LATENCY,
    "steps": STEPS,
    "delay-one": DELAY_ONE,
    "delay-concurrent": DELAY_MANY,
    "delay-tx": DELAY_TX,
    "drain-shared": DRAIN_SHARED,
    "drain-broker": MIGRATE,
    "lean": LEAN,
    "scale": SCALE,
    "dashboard": DASHBOARD,
}
STEP_COUNT = 5
PLAIN_LABEL = "plain no-op job"
STEPS_LABEL = f"{STEP_COUNT} no-op step.run calls"
STEADY = " · 1st→Nth done"  # label suffix of a drain's rate from its first completion on
CPU_LABEL = "machine CPU"  # a drain's row: the busy CPU of every process, per job (machine_cpu)
# worker -c of the step-overhead pairs: the first is the target's; 64 shows what bodies that
# wait on their steps' commits gain from more of them sharing each commit
STEP_BODIES = (8, 16, 64, 1)
SINGLE_BODY_SHARE = 10  # the -c 1 pair drains N / this many jobs (one body is slow by design)
# The raw system's figure in the step cell (``raw_system.step_ceiling``): what as many bodies as
# the target's workers run reach when each step is one INSERT committed on its own connection.
STEP_CEILING = (
    f"{STEP_BODIES[0]} threads, each its own connection: a job of {STEP_COUNT} INSERTs, "
    "each one a commit (no claim)"
)


def bodies_suffix(concurrency: int) -> str:
    """The label suffix of the step-overhead pair run at worker ``-c concurrency``; the first
    of ``STEP_BODIES`` (the target's pair) has none."""
    return "" if concurrency == STEP_BODIES[0] else f" · worker -c {concurrency}"


WARMUP_ENQUEUES = 10
FIRST_PICKUP_TIMEOUT_S = 60.0  # the first warm-up job also waits for the worker to start
PICKUP_TIMEOUT_S = 10.0


class System(Protocol):
    """What ``runner`` calls on each system: its lifecycle. The cells a system is measured in
    are the protocols below it implements (``GenericCells``, ``StepCells``, ``CeleryShaped``)."""

    name: str

    def setup(self) -> None: ...

    def teardown(self) -> None: ...

    def describe(self) -> dict[str, str]: ...


@runtime_checkable
class ProducerCells(Protocol):
    """Systems measured with many producer processes at once (``producers.py``)."""

    def enqueue_producers(self, n: int) -> dict[str, float]:
        """Label -> jobs/s of ``n`` jobs from ``producers.PRODUCERS`` processes. Leaves nothing
        enqueued."""
        ...


@runtime_checkable
class GenericCells(Protocol):
    """The cells every engine is measured in (not celery_compat: it has only Celery's shapes)."""

    def enqueue_one_by_one(self, n: int) -> dict[str, float]:
        """Label -> jobs/s, one producer call per job. Leaves nothing enqueued."""
        ...

    def enqueue_batched(self, n: int) -> dict[str, float]:
        """Label -> jobs/s, the system's bulk path. Leaves nothing enqueued."""
        ...

    def drain(self, n: int, processes: int) -> dict[str, DrainResult]:
        """Label -> drain of ``n`` pre-enqueued jobs by ``processes`` worker processes."""
        ...

    def idle_latency(self) -> list[float]:
        """Pick-up latencies in ms (warm-ups dropped) into one idle worker."""
        ...


@runtime_checkable
class StepCells(Protocol):
    """A system that has durable steps (ujobs-bridge); the others show "n/a" in this cell."""

    def step_overhead(self, n: int, rnd: int) -> dict[str, DrainResult]:
        """``PLAIN_LABEL`` and ``STEPS_LABEL`` (each + ``bodies_suffix(c)`` for every ``c`` of
        ``STEP_BODIES``) -> drain of such jobs, same workers within a pair."""
        ...


@runtime_checkable
class CeleryShaped(Protocol):
    """Celery's own API measured the same way on a real broker and on the bridge."""

    def delay_one(self, n: int) -> dict[str, float]:
        """Label -> tasks/s for ``n`` calls of ``noop.delay()``. Leaves nothing enqueued."""
        ...

    def delay_concurrent(self, n: int) -> dict[str, float]:
        """Label -> tasks/s for ``n`` ``noop.delay()`` split over ``SENDER_THREADS`` threads of
        this process, and over ``producers.PRODUCERS`` processes. Leaves nothing enqueued."""
        ...

    def delay_tx(self, n: int) -> dict[str, float]:
        """Label -> tasks/s for ``n`` ``noop.delay()`` in blocks of ``TX_SIZE`` (one transaction
        per block where the system has transactions). Leaves nothing enqueued."""
        ...

    def drain_shared(self, n: int) -> dict[str, DrainResult]:
        """Label -> drain of ``n`` pre-enqueued no-op shared-task messages."""
        ...


@runtime_checkable
class DelayCeiling(Protocol):
    """The raw ceiling of the Celery-shaped ``.delay()`` cell (``raw_send``: Celery's own send,
    its message one INSERT into the raw table)."""

    def delay_ceiling(self, n: int) -> dict[str, float]:
        """Label -> tasks/s for ``n`` calls of ``noop.delay()``. Leaves nothing enqueued."""
        ...


@runtime_checkable
class StepCeiling(Protocol):
    """The raw ceiling of the step-overhead cell: jobs of ``STEP_COUNT`` durable INSERTs."""

    def step_ceiling(self, n: int) -> dict[str, float]:
        """``STEP_CEILING`` -> jobs/s (of ``STEP_COUNT`` steps each) for ``n`` steps in all."""
        ...


@runtime_checkable
class LeanCells(Protocol):
    """A system whose job table's health is measured over a long run (ujobs-bridge)."""

    def lean_table(self, n: int) -> LeanResult:
        """``n`` jobs through enqueue -> claim -> settle with the purge running."""
        ...


@runtime_checkable
class DashboardCells(Protocol):
    """The dashboard cell (``dashboard_bench``): ujobs-bridge only, first round only."""

    def dashboard_pages(self, rows: int) -> DashboardResult: ...


@runtime_checkable
class FleetLatencyCells(Protocol):
    """The idle-fleet cell (``fleet_latency``): ujobs-bridge only, first round only."""

    def fleet_latency(self) -> list[FleetPoint]: ...


@runtime_checkable
class ScaleCells(Protocol):
    """The many-workers cell (``many_workers``): ujobs-bridge only, first round only."""

    def many_workers(self, n: int, counts: Sequence[int]) -> list[ScalePoint]: ...


@runtime_checkable
class BrokerDrain(Protocol):
    """``ujobs-bridge migrate``: a backlog real Celery published, drained into Postgres."""

    def drain_broker(self, n: int) -> dict[str, MigrateResult]:
        """Label (the broker) -> the CLI's drain of ``n`` messages published by Celery."""
        ...


def enqueue_rate(send: Callable[[int], object], n: int, reset: Callable[[], object]) -> float:
    """Jobs/s of ``send(n)``, after ``send(WARMUP_ENQUEUES)``; ``reset()`` clears each away."""
    send(WARMUP_ENQUEUES)
    reset()
    t0 = time.perf_counter()
    send(n)
    rate = n / (time.perf_counter() - t0)
    reset()
    return rate


def threaded_rate(
    send: Callable[[int], object], n: int, reset: Callable[[], object], threads: int
) -> float:
    """Jobs/s of ``n`` sends split over ``threads`` threads of this process (``send(count)`` in
    each), after each thread's ``WARMUP_ENQUEUES``; timed from a common start to the last
    thread's end; ``reset()`` clears each away. A thread's error is raised here."""
    share = max(1, n // threads)
    start = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            send(WARMUP_ENQUEUES)
            start.wait()
            start.wait()  # the warm-ups are cleared away: go
            send(share)
        except BaseException as exc:  # reported by the timing thread
            errors.append(exc)
            start.abort()

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        start.wait()
        reset()
        t0 = time.perf_counter()
        start.wait()
    except threading.BrokenBarrierError:
        pass
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    rate = share * threads / (time.perf_counter() - t0)
    reset()
    return rate


def timed_drain(
    *,
    n: int,
    spawn: Callable[[], list[Group]],
    done_count: Callable[[], int],
    settings: Settings,
    report_rss: bool = True,
) -> DrainResult:
    """Spawn the workers, wait for ``n`` completions, stop the workers (always)."""
    groups: list[Group] = []
    busy = machine_cpu.machine_busy_s()
    t0 = time.perf_counter()
    try:
        groups = spawn()
        with RssSampler([g.pgid for g in groups], settings.rss_sample_s) as sampler:
            first_count = wait_until(
                lambda: done_count() or None,
                timeout_s=settings.drain_deadline,
                what="the first completion",
                interval_s=settings.poll_s,
                watch=groups,
            )
            first_seconds = time.perf_counter() - t0
            rss_start = sampler.sample()
            remaining = settings.drain_deadline - first_seconds
            final_count = wait_until(
                lambda: c if (c := done_count()) >= n else None,
                timeout_s=max(remaining, 1.0),
                what=f"{n} completions",
                interval_s=settings.poll_s,
                watch=groups,
            )
            seconds = time.perf_counter() - t0
            busy = machine_cpu.machine_busy_s() - busy
            rss_end = sampler.sample()
            peak = sampler.peak
    finally:
        for group in groups:
            group.stop()
    return DrainResult(
        jobs=n,
        seconds=seconds,
        first_seconds=first_seconds,
        first_count=min(first_count, n),
        final_count=final_count,
        rss_start=rss_start,
        rss_end=rss_end,
        rss_peak=peak,
        report_rss=report_rss,
        machine_cpu_s=busy,
    )


def idle_latency(
    *,
    send: Callable[[float], object],
    receive: Callable[[float, float], float],
    settings: Settings,
    watch: Sequence[Group] = (),
) -> list[float]:
    """Send one job at a time; ``receive(sent, timeout)`` returns the body's ``time.time()``."""
    out: list[float] = []
    for i in range(settings.latency_warmup + settings.latency_samples):
        sent = time.time()
        send(sent)
        timeout = FIRST_PICKUP_TIMEOUT_S if i == 0 else PICKUP_TIMEOUT_S
        try:
            started = receive(sent, timeout)
        except BenchTimeout:
            for group in watch:
                if group.exited() is not None:
                    raise BenchTimeout(
                        f"{group.name} died; last lines:\n{group.log_tail()}"
                    ) from None
            raise
        if i >= settings.latency_warmup:
            out.append((started - sent) * 1000.0)
        time.sleep(settings.latency_gap_s)
    return out


def redis_receiver(client: redis.Redis, key: str) -> Callable[[float, float], float]:
    """A ``receive`` for bodies that RPUSH ``"<sent> <now>"`` onto ``key``."""

    def receive(sent: float, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchTimeout(f"no pick-up reported on {key} within {timeout:.0f}s")
            item = client.blpop([key], timeout=min(left, 1.0))
            if item is None:
                continue
            echoed, started = (float(x) for x in item[1].split())
            if echoed == sent:  # anything else is a stale report from an abandoned job
                return started

    return receive


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")
