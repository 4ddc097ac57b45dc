"""The Postgres driver's contract, statement by statement: claim, lease, fencing, rescue.

These are the promises the worker builds on; an in-memory driver, if one is ever added, must
pass this same file.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

from apps import basic_jobs
from ujobs_bridge.client import Client
from ujobs_bridge.db import jobs as driver
from ujobs_bridge.records import JobState, Settlement

NAMES = ["apps.basic_jobs.add"]


def claim(conn: psycopg.Connection[Any], limit: int, *, lease_s: float = 30.0, token: uuid.UUID | None = None) -> list[Any]:
    return driver.job_claim(
        conn, queue="basic", names=NAMES, limit=limit, token=token or uuid.uuid4(), lease_s=lease_s, worker="test", now=None
    )


def test_claim_takes_at_most_limit_rows_counts_the_attempt_and_sets_a_lease(client: Client, db: Any) -> None:
    client.enqueue_many([basic_jobs.add.call(i, i) for i in range(10)])
    got = claim(db, 4)
    assert len(got) == 4 and all(j.attempt == 1 for j in got)
    rows = db.execute(
        "select count(*) from x_jobs where state = 'running' and lease_token is not null "
        "and lease_expires_at > now() + interval '25 seconds' and claimed_by = 'test'"
    ).fetchone()
    assert rows == (4,)


def test_concurrent_claims_never_share_a_row(client: Client, dsn: str) -> None:
    client.enqueue_many([basic_jobs.add.call(i, i) for i in range(600)])
    seen: list[list[uuid.UUID]] = [[] for _ in range(4)]

    def run(slot: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while batch := claim(conn, 7):
                seen[slot] += [j.id for j in batch]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for part in seen for i in part]
    assert len(everything) == 600 and len(set(everything)) == 600


def test_claim_prefers_priority_then_due_time(client: Client, db: Any) -> None:
    low = basic_jobs.add.configure(client=client, priority=0).enqueue(1, 1)
    high = basic_jobs.add.configure(client=client, priority=5).enqueue(1, 1)
    assert [j.id for j in claim(db, 2)] == [high.id, low.id]


def test_a_write_with_a_stale_token_changes_nothing(client: Client, db: Any) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    first = claim(db, 1, lease_s=2)[0]
    db.execute("update x_jobs set lease_expires_at = now() - interval '1 second' where id = %s", (ref.id,))
    assert driver.job_rescue(db, limit=10, error="lost", now=None) == [(ref.id, JobState.READY)]
    second = claim(db, 1)[0]
    assert second.attempt == 2 and second.lease_token != first.lease_token
    stale = Settlement(ref.id, first.lease_token, JobState.DONE, output_json='"late"')
    assert driver.job_settle(db, [stale], None) == set()
    assert driver.job_heartbeat(db, [(ref.id, first.lease_token)], 30) == set()
    fresh = Settlement(ref.id, second.lease_token, JobState.DONE, output_json='"mine"')
    assert driver.job_settle(db, [fresh], None) == {ref.id}
    assert db.execute("select state, output, attempt from x_jobs where id = %s", (ref.id,)).fetchone() == ("done", "mine", 2)


def test_rescue_dead_letters_a_job_whose_attempts_are_spent(client: Client, db: Any) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    db.execute("update x_jobs set attempt = max_attempts - 1 where id = %s", (ref.id,))
    claim(db, 1)
    db.execute("update x_jobs set lease_expires_at = now() - interval '1 second' where id = %s", (ref.id,))
    assert driver.job_rescue(db, limit=10, error="UJ_WORKER_LOST: gone", now=None) == [(ref.id, JobState.DEAD)]


def test_a_live_lease_is_not_rescued_and_heartbeat_extends_it(client: Client, db: Any) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    job = claim(db, 1, lease_s=2)[0]
    assert driver.job_rescue(db, limit=10, error="x", now=None) == []
    assert driver.job_heartbeat(db, [(ref.id, job.lease_token)], 60) == {ref.id}
    row = db.execute("select lease_expires_at > now() + interval '50 seconds' from x_jobs where id = %s", (ref.id,)).fetchone()
    assert row == (True,)


def test_a_handed_back_attempt_is_not_counted(client: Client, db: Any) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    job = claim(db, 1)[0]
    back = Settlement(ref.id, job.lease_token, JobState.READY, error="UJ_WORKER_DRAINING: stop", uncount=1)
    assert driver.job_settle(db, [back], None) == {ref.id}
    assert db.execute("select state, attempt, lease_token from x_jobs where id = %s", (ref.id,)).fetchone() == ("ready", 0, None)


def test_jobs_of_unknown_names_are_not_claimed(client: Client, db: Any) -> None:
    basic_jobs.add.configure(client=client).enqueue(1, 1)
    got = driver.job_claim(db, queue="basic", names=["some.other"], limit=5, token=uuid.uuid4(), lease_s=30, worker="t", now=None)
    assert got == []


@pytest.mark.parametrize("state", ["done", "dead", "cancelled"])
def test_cancel_refuses_finished_jobs(client: Client, db: Any, state: str) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    db.execute("update x_jobs set state = %s where id = %s", (state, ref.id))
    assert driver.job_cancel(db, ref.id, "x") is False
