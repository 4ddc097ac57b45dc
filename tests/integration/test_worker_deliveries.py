"""The job context tells a body whether its row was claimed before (``redelivered``), whatever
gave the claim back: a snooze, a rescue after a lost lease, a shutdown's hand-back. ``attempt``
cannot tell: those paths give theirs back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from apps import delivery_jobs
from ujobs_bridge import FrozenClock, Worker, WorkerConfig
from ujobs_bridge._internal.config.loading import from_module
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge.client import Client
from ujobs_bridge.records import JobState, Settlement


@pytest.fixture
def worker(dsn: str, clock: FrozenClock) -> Iterator[Worker]:
    delivery_jobs.SEEN.clear()
    w = Worker(dsn, from_module(delivery_jobs), WorkerConfig(queues=("deliveries",)), clock=clock)
    yield w
    w.stop(timeout_s=2)


def state_of(db: psycopg.Connection[Any], job_id: uuid.UUID) -> tuple[Any, ...]:
    row = db.execute(
        "select state, attempt, deliveries, output from x_jobs where id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_a_first_claim_is_not_redelivered_and_the_claim_after_a_snooze_is(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    ref = delivery_jobs.snooze_once.configure(client=frozen_client).enqueue()
    assert worker.tick() == 1
    assert state_of(db, ref.id) == ("ready", 0, 1, None)  # the snooze gave the attempt back
    assert worker.tick() == 1
    assert state_of(db, ref.id) == ("done", 1, 2, True)
    assert delivery_jobs.SEEN == [(1, False), (1, True)]  # same attempt number, told apart


def test_a_job_rescued_after_its_worker_died_is_redelivered(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    ref = delivery_jobs.report.configure(client=frozen_client).enqueue()
    # a worker that claims it, then dies: its lease runs out at once
    (lost,) = leases_db.job_claim(
        db,
        leases_db.ClaimParams(
            queue="deliveries",
            names=["apps.delivery_jobs.report"],
            limit=1,
            token=uuid.uuid4(),
            lease_s=0,
            worker="died",
            now=None,
        ),
    )
    assert (lost.attempt, lost.deliveries) == (1, 1)
    assert worker.tick() == 1  # sweep (rescue), claim, run
    assert state_of(db, ref.id) == ("done", 2, 2, True)
    assert delivery_jobs.SEEN == [(2, True)]


def test_a_claim_handed_back_uncounted_is_still_a_delivery(frozen_client: Client, db: Any) -> None:
    ref = delivery_jobs.report.configure(client=frozen_client).enqueue()

    def claim() -> Any:
        (got,) = leases_db.job_claim(
            db,
            leases_db.ClaimParams(
                queue="deliveries",
                names=["apps.delivery_jobs.report"],
                limit=1,
                token=uuid.uuid4(),
                lease_s=30,
                worker="test",
                now=None,
            ),
        )
        return got

    first = claim()
    back = Settlement(ref.id, first.lease_token, JobState.READY, uncount=1, error="handed back")
    assert leases_db.job_settle(db, [back], None) == {ref.id}  # what a shutdown's hand-back writes
    second = claim()
    assert (first.attempt, first.deliveries) == (1, 1)
    assert (second.attempt, second.deliveries) == (1, 2)


def test_outage_hand_backs_are_capped_so_a_body_that_keeps_meeting_outages_ends_dead(
    frozen_client: Client, worker: Worker, db: Any, clock: FrozenClock
) -> None:
    """An outage gives the attempt back, but only ``OUTAGE_HANDBACKS`` times per job: then each
    one counts, and the job is dead once its attempts (2) are spent, not handed back forever."""
    ref = delivery_jobs.meets_outages.configure(client=frozen_client).enqueue()
    for _ in range(leases_db.OUTAGE_HANDBACKS + 10):  # a bound: the loop must end before it
        if state_of(db, ref.id)[0] == "dead":
            break
        assert worker.tick() == 1
        clock.advance(timedelta(seconds=2))  # past the outage's short delay
    row = db.execute(
        "select state, attempt, deliveries, outage_handbacks, last_error, finished_at"
        " from x_jobs where id = %s",
        (ref.id,),
    ).fetchone()
    state, attempt, deliveries, handbacks, last_error, finished_at = row
    assert (state, attempt) == ("dead", 2)
    assert deliveries == leases_db.OUTAGE_HANDBACKS + 2  # the free hand-backs, then two attempts
    assert handbacks == leases_db.OUTAGE_HANDBACKS + 2
    assert "UJ_DATABASE_UNAVAILABLE" in last_error and finished_at is not None
    # the first OUTAGE_HANDBACKS runs all saw attempt 1: those hand-backs were free
    assert [a for a, _ in delivery_jobs.SEEN] == [1] * (leases_db.OUTAGE_HANDBACKS + 1) + [2]


def test_an_outage_a_pool_child_meets_hands_the_attempt_back_uncounted_as_a_thread_does(
    dsn: str, frozen_client: Client, db: Any
) -> None:
    """Under ``-P processes`` the outage a body meets (a Celery task's revoke check or result
    write on a connection the server dropped) crosses from the child as an outage: the attempt
    is handed back uncounted, not failed as the job's own error (which a Celery task, retried
    only by Celery's own policy, would end dead with)."""
    ref = delivery_jobs.meets_outages.configure(client=frozen_client).enqueue()
    worker = Worker(
        dsn,
        from_module(delivery_jobs),
        WorkerConfig(queues=("deliveries",), pool="processes", concurrency=1),
        app_spec="apps.delivery_jobs",
    )
    try:
        assert worker.tick() == 1
    finally:
        worker.stop(timeout_s=2)
    row = db.execute(
        "select state, attempt, outage_handbacks, last_error from x_jobs where id = %s", (ref.id,)
    ).fetchone()
    assert row is not None
    assert row[:3] == ("ready", 0, 1), row
    assert "UJ_DATABASE_UNAVAILABLE" in row[3]


def test_a_drains_hand_backs_are_not_capped(frozen_client: Client, db: Any) -> None:
    """Only outage hand-backs are counted: a shutdown's hand-back gives the attempt back always."""
    ref = delivery_jobs.report.configure(client=frozen_client).enqueue()
    db.execute("update x_jobs set outage_handbacks = 100 where id = %s", (ref.id,))
    params = leases_db.ClaimParams(
        queue="deliveries",
        names=["apps.delivery_jobs.report"],
        limit=1,
        token=uuid.uuid4(),
        lease_s=30,
        worker="test",
        now=None,
    )
    (first,) = leases_db.job_claim(db, params)
    back = Settlement(ref.id, first.lease_token, JobState.READY, uncount=1, error="drained")
    assert leases_db.job_settle(db, [back], None) == {ref.id}
    assert state_of(db, ref.id)[:2] == ("ready", 0)
