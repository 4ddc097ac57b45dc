"""Hand-offs (migration 0027): the insert of a job due now claims it for an idle, armed worker.

What a user relies on: a job sent to an idle worker starts without a claim, exactly once; a
worker whose listen session is gone is never handed one (its jobs are claimed as before); a
hand-off whose notification never reached the worker still runs once the listener is back; a
worker that stops hands back, uncounted, what it was handed and never ran; a job that is not
due, carries a key or does not fit in a notification is woken and claimed as before.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from test_worker import armed, make_worker, ready_for_hand_off, row  # noqa: F401 (a fixture)

from apps import basic_jobs
from conftest import wait_for
from ujobs_bridge._internal.worker.listener import HandOffListening
from ujobs_bridge.client import Client


@pytest.fixture
def worker(make_worker: Any, db: Any) -> Any:
    """A worker of queue ``basic``, idle, its mark armed for a hand-off (it polls rarely)."""
    idle = make_worker(frozen=False, poll_s=60)
    idle.start()
    ready_for_hand_off(db, idle, "basic")
    return idle


def lease(db: psycopg.Connection[Any], job_id: Any) -> tuple[Any, ...] | None:
    """The job's lease row: (worker, attempt, started_at), or None."""
    return db.execute(
        "select l.worker, l.attempt, l.started_at from x_job_leases as l"
        " join x_jobs as j on j.id = l.job_id and j.lease_token = l.token where l.job_id = %s",
        (job_id,),
    ).fetchone()


def deaf(worker: Any) -> HandOffListening:
    """The worker's hand-off hooks with ``take`` dropping every hand-off: a notification lost
    on its way (the original hooks are returned, to put back)."""
    original = worker.listener.hand_off
    assert original is not None
    worker.listener.hand_off = HandOffListening(
        channel=original.channel,
        lock_key=original.lock_key,
        take=lambda claimed: None,
        relisten=original.relisten,
    )
    return original


def listen_pid(db: psycopg.Connection[Any], worker: Any) -> int:
    found = db.execute(
        "select pid from pg_locks where locktype = 'advisory' and classid = 1970958178"
        " and objid = %s and granted and mode = 'ExclusiveLock'",
        (worker.hand_lock_key,),
    ).fetchone()
    assert found is not None, "the listen session holds no hand-off lock"
    return int(found[0])


def test_a_handed_job_is_the_workers_running_claim_before_its_body_starts(
    client: Client, worker: Any, db: Any
) -> None:
    """What the insert writes is what a claim writes: running, attempt 1, one delivery, the
    worker's lease and lease row (start not recorded: a worker killed now is not charged)."""
    original = deaf(worker)
    ref = basic_jobs.add.configure(client=client).enqueue(2, 3)
    found = db.execute(
        "select state, attempt, deliveries, claimed_by, lease_expires_at > now() from x_jobs"
        " where id = %s",
        (ref.id,),
    ).fetchone()
    assert found == ("running", 1, 1, worker.id, True)
    assert lease(db, ref.id) == (worker.id, 1, None)
    assert armed(db, worker) == []  # the hand-off disarmed the mark
    worker.listener.hand_off = original


def test_a_worker_whose_listen_session_is_gone_is_never_handed_a_job(
    client: Client, worker: Any, db: Any
) -> None:
    """Its mark is still armed (rows outlive sessions), but its lock went with its session:
    the insert leaves the job ready, and once the listener is back the worker claims it."""
    worker.listener.reconnect_s = 30.0  # stays away for the whole check
    db.execute("select pg_terminate_backend(%s)", (listen_pid(db, worker),))
    wait_for(
        lambda: not worker.listener.hand_offs_live.is_set(), timeout=10, what="the listener gone"
    )
    assert armed(db, worker) == ["basic"]
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    assert row(db, ref.id)["state"] == "ready" and lease(db, ref.id) is None
    assert worker.counts.hand_offs == 0


def test_a_hand_off_whose_notification_was_lost_runs_once_the_listener_is_back(
    client: Client, worker: Any, db: Any
) -> None:
    original = deaf(worker)
    ref = basic_jobs.add.configure(client=client).enqueue(20, 22)
    assert row(db, ref.id)["state"] == "running" and worker.in_flight() == 0
    worker.listener.hand_off = original
    worker.listener.reconnect_s = 0.05
    db.execute("select pg_terminate_backend(%s)", (listen_pid(db, worker),))
    wait_for(lambda: row(db, ref.id)["state"] == "done", timeout=10, what="the recovered job")
    assert row(db, ref.id)["attempt"] == 1 and row(db, ref.id)["output"] == 42


def test_a_stopping_worker_hands_back_uncounted_what_it_was_handed_and_never_ran(
    client: Client, worker: Any, db: Any
) -> None:
    deaf(worker)
    ref = basic_jobs.add.configure(client=client).enqueue(1, 2)
    assert row(db, ref.id)["state"] == "running"
    worker.stop(timeout_s=2)
    found = row(db, ref.id)
    assert (found["state"], found["attempt"], found["lease_token"]) == ("ready", 0, None)
    assert lease(db, ref.id) is None


def test_jobs_not_due_keyed_or_too_large_for_a_notification_are_woken_not_handed(
    client: Client, worker: Any, db: Any
) -> None:
    later = basic_jobs.add.configure(client=client, delay=3600).enqueue(1, 1)
    assert row(db, later.id)["state"] == "ready"
    ready_for_hand_off(db, worker, "basic")
    keyed = basic_jobs.add.configure(client=client, idempotency_key="k").enqueue(1, 2)
    wait_for(lambda: row(db, keyed.id)["state"] == "done", timeout=10, what="the keyed job")
    ready_for_hand_off(db, worker, "basic")
    large = basic_jobs.add.configure(client=client).enqueue("x" * 8000, "y")
    wait_for(lambda: row(db, large.id)["state"] == "done", timeout=10, what="the large job")
    assert worker.counts.hand_offs == 0 and worker.counts.claims >= 2
    small = basic_jobs.add.configure(client=client).enqueue(2, 2)
    wait_for(lambda: row(db, small.id)["state"] == "done", timeout=10, what="the small job")
    assert worker.counts.hand_offs == 1


def test_after_a_reload_a_job_of_a_name_the_worker_no_longer_runs_is_not_handed_to_it(
    client: Client, worker: Any, db: Any
) -> None:
    kept = {name: d for name, d in worker.registry.items() if name != basic_jobs.add.name}
    worker.reload(kept, queues=("basic",))

    def names() -> list[str]:
        found = db.execute(
            "select names from x_queue_waiters where worker_id = %s and armed", (worker.id,)
        ).fetchone()
        return list(found[0]) if found else []

    wait_for(lambda: names() == sorted(kept), timeout=10, what="marks naming the kept jobs")
    dropped = basic_jobs.add.configure(client=client).enqueue(1, 1)
    assert row(db, dropped.id)["state"] == "ready" and worker.counts.hand_offs == 0
    ran = basic_jobs.whereami.configure(client=client).enqueue()
    wait_for(lambda: row(db, ran.id)["state"] == "done", timeout=10, what="a job it runs")
    assert worker.counts.hand_offs == 1
