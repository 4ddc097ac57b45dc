"""Body starts recorded before they could be charged: which path each start takes.

Why it exists: the process-level proof is ``test_worker_faults.py`` (a SIGKILLed worker is charged
only for the bodies it started); these pin the rules it rests on, without a database: a start the
claim recorded needs nothing more, a first delivery's start is queued for the claim loop (and
dropped when its outcome goes in the same write), a redelivery's start (or that of a job whose
lease could not be renewed) is recorded before its body runs (concurrent ones share one
statement), a start refused because the lease is gone stops the job, and a start that cannot be
written waits until the attempt is stopped.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge import job
from ujobs_bridge._internal.worker.inflight import InFlight
from ujobs_bridge._internal.worker.start_marks import Lease, StartMarks
from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.records import ClaimedJob


@job(queue="marks")
def body() -> None:
    return None


def entry(*, deliveries: int = 1, started: bool = False) -> InFlight:
    claimed = ClaimedJob(
        id=uuid.uuid4(),
        name=body.name,
        queue="marks",
        input={},
        attempt=1,
        max_attempts=3,
        lease_token=uuid.uuid4(),
        expired=False,
        deliveries=deliveries,
        started=started,
    )
    held = InFlight(claimed, body)
    held.armed = claimed.started
    return held


def lease(held: InFlight) -> Lease:
    return (held.claimed.id, held.claimed.lease_token)


class Writes:
    """A fake ``Claims.start``: records each batch; answers the leases not in ``gone``."""

    def __init__(self) -> None:
        self.batches: list[list[Lease]] = []
        self.gone: set[UUID] = set()
        self.fail: BaseException | None = None
        self.release = threading.Event()
        self.release.set()

    def __call__(self, leases: list[Lease]) -> set[UUID]:
        self.release.wait(10)
        if self.fail is not None:
            raise self.fail
        self.batches.append(list(leases))
        return {i for i, _ in leases if i not in self.gone}


def test_a_start_the_claim_recorded_needs_nothing_more() -> None:
    writes, woken = Writes(), []
    marks = StartMarks(writes, wake=lambda: woken.append(1))
    assert marks.begin(entry(started=True))
    assert not marks.must_wait(entry(started=True))
    assert (writes.batches, woken, bool(marks)) == ([], [], False)


def test_a_first_delivery_starts_at_once_and_its_start_waits_for_the_claim_loop() -> None:
    writes, woken = Writes(), []
    marks = StartMarks(writes, wake=lambda: woken.append(1))
    first, second, third = entry(), entry(), entry()
    assert not marks.must_wait(first)
    assert marks.begin(first) and marks.begin(second) and marks.begin(third)
    assert first.armed and writes.batches == [] and woken == [1]  # woken once per queue
    assert marks.take(interval_s=60) == []  # not due yet
    taken = marks.take(interval_s=60, force=True, settled=[second.claimed.id])
    assert sorted(taken) == sorted([lease(first), lease(third)])  # second's settle removes it
    assert not marks
    marks.restore(taken)  # a write that failed: kept for the next
    assert sorted(marks.take(interval_s=0)) == sorted(taken)


def test_redeliveries_record_their_start_first_and_concurrent_ones_share_a_statement() -> None:
    writes = Writes()
    marks = StartMarks(writes)
    held = [entry(deliveries=2) for _ in range(4)]
    assert all(marks.must_wait(h) for h in held)
    writes.release.clear()  # the first statement waits: the others queue behind it
    results: dict[UUID, bool] = {}

    def start(h: InFlight) -> None:
        results[h.claimed.id] = marks.begin(h)

    threads = [threading.Thread(target=start, args=(h,)) for h in held]
    threads[0].start()
    for t in threads[1:]:
        t.start()
    writes.release.set()
    for t in threads:
        t.join(10)
    assert all(results[h.claimed.id] for h in held) and all(h.armed for h in held)
    assert sorted(lease for batch in writes.batches for lease in batch) == sorted(
        lease(h) for h in held
    )
    assert len(writes.batches) <= 3 and marks.statements == len(writes.batches)


def test_a_job_whose_lease_could_not_be_renewed_starts_only_once_its_start_is_recorded() -> None:
    """The worker lost touch for about a lease: another worker may have rescued the job, so
    even a first delivery waits for its start to be recorded (which needs its lease)."""
    writes = Writes()
    marks = StartMarks(writes)
    held = entry()
    held.doubtful = True
    assert marks.must_wait(held)
    assert marks.begin(held) and held.armed
    assert writes.batches == [[lease(held)]] and not marks


def test_a_start_refused_because_the_lease_is_gone_stops_the_job() -> None:
    writes = Writes()
    marks = StartMarks(writes)
    held = entry(deliveries=3)
    writes.gone.add(held.claimed.id)
    assert not marks.begin(held)
    assert not held.armed and held.signal.code is ErrorCode.LEASE_LOST


class Lines(logging.Handler):
    """The messages a logger emitted, whatever propagation another test left it with."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_start_the_database_cannot_take_waits_until_the_attempt_is_stopped() -> None:
    logger = logging.getLogger("ujobs.worker")
    lines = Lines()
    logger.addHandler(lines)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        _start_waits_until_stopped()
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    assert any("start_waits" in line for line in lines.lines), lines.lines


def _start_waits_until_stopped() -> None:
    writes = Writes()
    writes.fail = psycopg.OperationalError("connection refused")
    marks = StartMarks(writes)
    held = entry(deliveries=2)
    outcome: list[Any] = []
    waiting = threading.Thread(target=lambda: outcome.append(marks.begin(held)))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # retrying with backoff, the body not started
    held.signal.abort(ErrorCode.WORKER_DRAINING, "the worker is shutting down")
    waiting.join(10)
    assert outcome == [False] and not held.armed
