"""A lean x_jobs (migration 0012): which writes are HOT, where the rescue finds running jobs, and
the insert's own wake-up.

The promises: claiming a job, settling a finished job without an idempotency key and renewing a
lease change no indexed column of x_jobs (the claim's set lives in ``x_job_claimable`` since
migration 0019; the dashboard's indexes, migration 0014, name none either), so Postgres can
update the row in place (HOT: no new index entries, the old version pruned without VACUUM).
``x_job_claimable`` holds exactly the claimable jobs, whichever statement moves a job in or out.
A lease some other statement ended (a cancel) never keeps a later lease of the same job from
being rescued. A job enqueued inside a transaction wakes the workers of its queue at commit,
not before.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg
from waiting_support import waiting_for

from apps import basic_jobs
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db import session
from ujobs_bridge._internal.db import steering as steering_db
from ujobs_bridge.client import Client
from ujobs_bridge.records import JobState, Settlement

NAMES = ["apps.basic_jobs.add"]


def _claim(conn: psycopg.Connection[Any], *, lease_s: float = 30.0) -> Any:
    (job,) = leases_db.job_claim(
        conn,
        leases_db.ClaimParams("basic", NAMES, 1, uuid.uuid4(), lease_s, "test"),
    )
    return job


def _claimable(conn: psycopg.Connection[Any]) -> list[uuid.UUID]:
    return [r[0] for r in conn.execute("select id from x_job_claimable order by id").fetchall()]


def _updates(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(updates, HOT updates) of x_jobs so far in the current transaction."""
    row = conn.execute(
        "select pg_stat_get_xact_tuples_updated('x_jobs'::regclass),"
        " pg_stat_get_xact_tuples_hot_updated('x_jobs'::regclass)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_the_claim_the_heartbeat_and_the_settle_are_hot_updates(client: Client, db: Any) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 2)
    assert _claimable(db) == [ref.id]
    with db.transaction():
        assert _updates(db) == (0, 0)
        job = _claim(db)
        assert _updates(db) == (1, 1)  # it leaves x_job_claimable, no x_jobs index
        assert _claimable(db) == []
        assert leases_db.job_heartbeat(db, [(ref.id, job.lease_token)], 60) == {ref.id}
        assert _updates(db) == (2, 2)
        done = Settlement(ref.id, job.lease_token, JobState.DONE, output_json="3")
        assert leases_db.job_settle(db, [done], None) == {ref.id}
        assert _updates(db) == (3, 3)
    assert db.execute("select state, output from x_jobs where id = %s", (ref.id,)).fetchone() == (
        "done",
        3,
    )
    assert db.execute("select count(*) from x_job_leases").fetchone() == (0,)


# What claiming a job (ready -> running), settling a finished job (running -> done) or renewing
# a lease writes a new value into. An index naming any of them (key, INCLUDE, expression or
# partial predicate) would make every claim or settle a non-HOT update again, as 0011's
# observation indexes did (0014 replaced them) and 0012's claim index did (0019 moved it).
SETTLE_CHANGES = ("state", "output", "lease_token", "lease_expires_at", "claimed_by",
                  "updated_at", "finished_at", "attempt", "deliveries", "claimable")  # fmt: skip


def test_no_index_on_x_jobs_names_a_column_a_claim_settle_or_heartbeat_changes(db: Any) -> None:
    rows = db.execute(
        "select c.relname, pg_get_indexdef(i.indexrelid) from pg_index i"
        " join pg_class c on c.oid = i.indexrelid where i.indrelid = 'x_jobs'::regclass"
    ).fetchall()
    assert len(rows) >= 5
    named = {
        name: [col for col in SETTLE_CHANGES if re.search(rf"\b{col}\b", definition)]
        for name, definition in rows
    }
    assert {name: cols for name, cols in named.items() if cols} == {}


def test_a_finished_keyed_job_frees_its_key(client: Client, db: Any) -> None:
    first = basic_jobs.add.configure(client=client, idempotency_key="k-1").enqueue(1, 2)
    again = basic_jobs.add.configure(client=client, idempotency_key="k-1").enqueue(1, 2)
    assert again.existing and again.id == first.id
    job = _claim(db)
    done = Settlement(first.id, job.lease_token, JobState.DONE, output_json="3")
    assert leases_db.job_settle(db, [done], None) == {first.id}
    fresh = basic_jobs.add.configure(client=client, idempotency_key="k-1").enqueue(1, 2)
    assert not fresh.existing and fresh.id != first.id


def test_a_lease_ended_by_a_cancel_never_hides_a_later_lease_from_the_rescue(
    client: Client, db: Any
) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 2)
    first = _claim(db)
    assert steering_db.job_cancel(db, ref.id, "UJ_JOB_CANCELLED: by test")
    assert steering_db.job_requeue(db, ref.id, None)
    second = _claim(db, lease_s=30)
    assert second.lease_token != first.lease_token
    db.execute(
        "update x_jobs set lease_expires_at = now() - interval '1 second' where id = %s", (ref.id,)
    )
    assert leases_db.job_rescue(db, limit=10, error="UJ_WORKER_LOST: gone", now=None) == [
        (ref.id, JobState.READY)
    ]
    assert db.execute("select count(*) from x_job_leases").fetchone() == (0,)
    third = _claim(db)
    assert third.attempt == 2  # the cancelled attempt was reset by the requeue; rescue kept 1
    assert db.execute("select job_id, token from x_job_leases").fetchall() == [
        (ref.id, third.lease_token)
    ]


def test_an_enqueue_wakes_the_queue_at_commit_not_before(client: Client, dsn: str) -> None:
    with (
        psycopg.connect(dsn, autocommit=True) as listener,
        psycopg.connect(dsn, autocommit=True) as marker,
        psycopg.connect(dsn) as producer,
    ):
        session.listen_for_jobs(listener)
        waiting_for(marker, "basic")  # a worker waits for the queue (0021)
        basic_jobs.add.configure(conn=producer).enqueue(1, 2)
        marker.execute("select pg_notify('x_jobs_ready', 'marker')")
        got = [n.payload for n in listener.notifies(timeout=30, stop_after=1)]
        assert got == ["marker"]  # nothing from the uncommitted insert came before it
        producer.commit()
        got = [n.payload for n in listener.notifies(timeout=30, stop_after=1)]
        assert got == ["basic"]


def test_the_claim_skips_a_job_another_transaction_holds_and_never_waits(
    client: Client, db: Any, dsn: str
) -> None:
    """A statement that moves a job in or out of the claim's set locks the job row first and its
    x_job_claimable row second (the trigger); the claim locks them the other way round, both
    SKIP LOCKED, so it passes over the job instead of waiting (or deadlocking) on it."""
    ref = basic_jobs.add.configure(client=client).enqueue(1, 2)
    db.execute("set statement_timeout = '30s'")  # a claim that waited would fail, not hang
    params = leases_db.ClaimParams("basic", NAMES, 1, uuid.uuid4(), 30.0, "test")
    with psycopg.connect(dsn) as holder:
        holder.execute("select id from x_jobs where id = %s for update", (ref.id,))
        assert leases_db.job_claim(db, params) == []  # the job row is held: skipped
        holder.execute(
            "update x_jobs set run_at = run_at - interval '1 second' where id = %s", (ref.id,)
        )
        assert leases_db.job_claim(db, params) == []  # both rows held: skipped at the head
        holder.rollback()
    assert _claim(db).id == ref.id
    assert _claimable(db) == []


def test_a_vacuum_of_the_claim_table_keeps_its_emptied_pages(client: Client, db: Any) -> None:
    # Truncating the claim table's heap would take a lock every claim waits on (migration 0020):
    # a plain VACUUM after the claims emptied it leaves the file as it was.
    client.enqueue_many([basic_jobs.add.call(i, 1) for i in range(2000)])
    size = "select pg_relation_size('x_job_claimable')"
    grown = db.execute(size).fetchone()[0]
    assert grown > 8192
    db.execute("update x_jobs set state = 'cancelled', finished_at = now() where state = 'ready'")
    assert db.execute("select count(*) from x_job_claimable").fetchone() == (0,)
    db.execute("vacuum x_job_claimable")
    assert db.execute(size).fetchone()[0] == grown
