"""The Postgres driver's contract, statement by statement: claim, lease, fencing, rescue, and
the rest of the engine's ``db`` surface (scheduling, outbox, retention, session).

These are the promises the worker builds on; an in-memory driver, if one is ever added, must
pass this same file.
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from apps import basic_jobs
from conftest import wait_for
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db import outbox as outbox_db
from ujobs_bridge._internal.db import retention, session
from ujobs_bridge._internal.db import scheduling as sched
from ujobs_bridge._internal.db import steering as steering_db
from ujobs_bridge._internal.db.retention import PurgeBatch
from ujobs_bridge._internal.db.scheduling import FireParams, LeaderTerm
from ujobs_bridge.client import Client
from ujobs_bridge.records import JobState, Settlement

NAMES = ["apps.basic_jobs.add"]


def claim(
    conn: psycopg.Connection[Any],
    limit: int,
    *,
    lease_s: float = 30.0,
    token: uuid.UUID | None = None,
    start: int | None = None,
) -> list[Any]:
    """``start``: how many of the rows start at once (default: all, as a worker with that many
    free slots)."""
    return leases_db.job_claim(
        conn,
        leases_db.ClaimParams(
            queue="basic",
            names=NAMES,
            limit=limit,
            token=token or uuid.uuid4(),
            lease_s=lease_s,
            worker="test",
            now=None,
            start=start,
        ),
    )


def expire_lease(conn: psycopg.Connection[Any], job_id: Any) -> None:
    conn.execute(
        "update x_jobs set lease_expires_at = now() - interval '1 second' where id = %s", (job_id,)
    )


def lease_rows(conn: psycopg.Connection[Any]) -> dict[Any, tuple[bool, float | None]]:
    """job id: (its start recorded, its recorded lease length), for every lease row."""
    rows = conn.execute(
        "select job_id, started_at is not null, lease_s from x_job_leases"
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_claim_takes_at_most_limit_rows_counts_the_attempt_and_sets_a_lease(
    client: Client, db: Any
) -> None:
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
    db.execute(
        "update x_jobs set lease_expires_at = now() - interval '1 second' where id = %s", (ref.id,)
    )
    assert leases_db.job_rescue(db, limit=10, error="lost", now=None) == [(ref.id, JobState.READY)]
    second = claim(db, 1)[0]
    assert second.attempt == 2 and second.lease_token != first.lease_token
    stale = Settlement(ref.id, first.lease_token, JobState.DONE, output_json='"late"')
    assert leases_db.job_settle(db, [stale], None) == set()
    assert leases_db.job_heartbeat(db, [(ref.id, first.lease_token)], 30) == set()
    fresh = Settlement(ref.id, second.lease_token, JobState.DONE, output_json='"mine"')
    assert leases_db.job_settle(db, [fresh], None) == {ref.id}
    assert db.execute(
        "select state, output, attempt from x_jobs where id = %s", (ref.id,)
    ).fetchone() == ("done", "mine", 2)


def test_rescue_dead_letters_a_job_whose_attempts_are_spent(client: Client, db: Any) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    db.execute("update x_jobs set attempt = max_attempts - 1 where id = %s", (ref.id,))
    claim(db, 1)
    db.execute(
        "update x_jobs set lease_expires_at = now() - interval '1 second' where id = %s", (ref.id,)
    )
    assert leases_db.job_rescue(db, limit=10, error="UJ_WORKER_LOST: gone", now=None) == [
        (ref.id, JobState.DEAD)
    ]


def test_a_live_lease_is_not_rescued_and_heartbeat_extends_it(client: Client, db: Any) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    job = claim(db, 1, lease_s=2)[0]
    assert leases_db.job_rescue(db, limit=10, error="x", now=None) == []
    assert leases_db.job_heartbeat(db, [(ref.id, job.lease_token)], 60) == {ref.id}
    row = db.execute(
        "select lease_expires_at > now() + interval '50 seconds' from x_jobs where id = %s",
        (ref.id,),
    ).fetchone()
    assert row == (True,)


def test_a_claim_records_the_start_of_its_first_rows_and_job_start_the_rest(
    client: Client, db: Any
) -> None:
    """The claim marks the first ``start`` rows in claim order as started (and says so); the
    worker records the others' starts with ``job_start`` when slots free up. A lease a cancel
    ended is not marked: that job must not start."""
    low = basic_jobs.add.configure(client=client, priority=0).enqueue(1, 1)
    high = basic_jobs.add.configure(client=client, priority=5).enqueue(2, 2)
    third = basic_jobs.add.configure(client=client, priority=0).enqueue(3, 3)
    got = {j.id: j for j in claim(db, 3, lease_s=7, start=1)}
    assert [i for i, j in got.items() if j.started] == [high.id]
    assert lease_rows(db) == {high.id: (True, 7.0), low.id: (False, 7.0), third.id: (False, 7.0)}
    assert steering_db.job_cancel(db, third.id, "UJ_JOB_CANCELLED: test")
    leases = [(i, got[i].lease_token) for i in (low.id, third.id)]
    assert leases_db.job_start(db, leases) == {low.id}
    assert leases_db.job_start(db, []) == set()
    assert lease_rows(db) == {high.id: (True, 7.0), low.id: (True, 7.0)}


def test_rescue_hands_back_uncounted_a_job_whose_body_never_started(
    client: Client, db: Any
) -> None:
    """A worker died holding a prefetched job it never started: the rescue gives it back
    ``ready`` with its attempt uncounted (history: ``handed_back``); a started one on its last
    attempt is dead."""
    waiting = basic_jobs.add.configure(client=client).enqueue(1, 1)
    (claimed,) = claim(db, 1, start=0)
    running = basic_jobs.add.configure(client=client).enqueue(2, 2)
    claim(db, 1)
    db.execute("update x_jobs set max_attempts = 1")
    expire_lease(db, waiting.id)
    expire_lease(db, running.id)
    found = leases_db.job_rescue_jobs(
        db,
        limit=10,
        error="UJ_WORKER_LOST: lost",
        unstarted_error="UJ_WORKER_LOST: unstarted",
        now=None,
    )
    assert sorted(found, key=lambda r: r.started) == [
        leases_db.Rescued(waiting.id, JobState.READY, False),
        leases_db.Rescued(running.id, JobState.DEAD, True),
    ]
    rows = db.execute(
        "select id, state, attempt, last_error from x_jobs where id = any(%s)",
        ([waiting.id, running.id],),
    ).fetchall()
    assert sorted(rows, key=lambda r: r[1]) == [
        (running.id, "dead", 1, "UJ_WORKER_LOST: lost"),
        (waiting.id, "ready", 0, "UJ_WORKER_LOST: unstarted"),
    ]
    history = db.execute(
        "select job_id, token, attempt, outcome from x_job_attempts where job_id = %s",
        (waiting.id,),
    ).fetchall()
    assert history == [(waiting.id, claimed.lease_token, 1, "handed_back")]
    assert lease_rows(db) == {}


def test_no_lease_is_rescued_before_the_database_was_up_for_its_length(
    client: Client, db: Any
) -> None:
    """A lease runs out in the database's uptime only: one whose recorded length is longer than
    the server has been up is not rescued, however long ago it expired; the same lease with a
    length the uptime covers is. A lease row without a length (a worker from before 0022) is
    judged as started, and waits the rescuer's lease."""
    up_since, now = leases_db.outage_grace(db)
    started = db.execute("select pg_postmaster_start_time()").fetchone()
    assert started is not None and started[0] <= up_since <= now
    uptime = (now - up_since).total_seconds()
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    claim(db, 1, lease_s=uptime + 3600, start=0)
    db.execute("update x_jobs set max_attempts = 1")
    expire_lease(db, ref.id)
    assert leases_db.job_rescue(db, limit=10, error="x", now=None) == []
    db.execute("update x_job_leases set lease_s = null")  # as a worker before 0022 wrote it
    assert (
        leases_db.job_rescue_jobs(
            db, limit=10, error="x", unstarted_error="y", now=None, lease_s=uptime + 3600
        )
        == []
    )
    assert leases_db.job_rescue_jobs(
        db, limit=10, error="x", unstarted_error="y", now=None, lease_s=1
    ) == [leases_db.Rescued(ref.id, JobState.DEAD, True)]


def test_a_handed_back_attempt_is_not_counted(client: Client, db: Any) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    job = claim(db, 1)[0]
    back = Settlement(
        ref.id, job.lease_token, JobState.READY, error="UJ_WORKER_DRAINING: stop", uncount=1
    )
    assert leases_db.job_settle(db, [back], None) == {ref.id}
    assert db.execute(
        "select state, attempt, lease_token from x_jobs where id = %s", (ref.id,)
    ).fetchone() == ("ready", 0, None)


def test_jobs_of_unknown_names_are_not_claimed(client: Client, db: Any) -> None:
    basic_jobs.add.configure(client=client).enqueue(1, 1)
    got = leases_db.job_claim(
        db,
        leases_db.ClaimParams(
            queue="basic",
            names=["some.other"],
            limit=5,
            token=uuid.uuid4(),
            lease_s=30,
            worker="t",
            now=None,
        ),
    )
    assert got == []


@pytest.mark.parametrize("state", ["done", "dead", "cancelled"])
def test_cancel_refuses_finished_jobs(client: Client, db: Any, state: str) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    db.execute("update x_jobs set state = %s where id = %s", (state, ref.id))
    assert steering_db.job_cancel(db, ref.id, "x") is False


# ---------------------------------------------------------------------------- the rest of the engine's db surface
# Scheduling (lease, fires, watermarks), outbox, retention and session statements: each function
# of ``ujobs_bridge._internal.db`` is held to at least one behaviour here, against real Postgres.


def _group() -> str:
    return f"contract-{uuid.uuid4().hex[:8]}"


def test_the_lease_goes_to_one_holder_renews_by_term_and_resigning_frees_it(db: Any) -> None:
    group = _group()
    first = LeaderTerm(group, "node-a", 30.0)
    term = sched.leader_elect(db, first)
    assert term == 1
    assert sched.leader_elect(db, LeaderTerm(group, "node-b", 30.0)) is None  # a live lease holds
    held = LeaderTerm(group, "node-a", 30.0, term)
    assert sched.leader_renew(db, held) is True
    assert (
        sched.leader_renew(db, LeaderTerm(group, "node-a", 30.0, term + 1)) is False
    )  # not our term
    assert (
        sched.leader_renew(db, LeaderTerm(group, "node-b", 30.0, term)) is False
    )  # not our holder
    info = sched.leader_get(db, group)
    assert info is not None and (info.holder, info.term, info.live) == ("node-a", 1, True)
    sched.leader_resign(db, held)
    assert sched.leader_get(db, group) == sched.LeaderInfo("node-a", 1, False)
    assert sched.leader_elect(db, LeaderTerm(group, "node-b", 30.0)) == 2  # the next term
    assert sched.leader_renew(db, held) is False  # the old term can never renew the winner's row
    assert sched.leader_get(db, _group()) is None


def test_an_occurrence_fires_once_and_the_watermark_never_moves_back(db: Any) -> None:
    task = _group()
    at = datetime(2026, 1, 1, 2, tzinfo=UTC)
    job_id = uuid.uuid4()
    assert sched.scheduler_fire(db, FireParams(task, at, False, (job_id,))) is True
    assert sched.scheduler_fire(db, FireParams(task, at, True, ())) is False  # already fired
    later = at + timedelta(hours=1)
    assert sched.scheduler_fire(db, FireParams(task, later, True, ())) is True
    occurrence, catch_up, fired_at = sched.last_fires(db)[task]
    assert occurrence == later and catch_up is True and fired_at is not None
    sched.scheduler_watermark_set(db, task, later)
    sched.scheduler_watermark_set(db, task, at)  # older: ignored
    assert sched.watermarks(db)[task] == later


def test_a_staged_row_is_claimed_once_committed_marked_and_published_once(
    client: Client, db: Any, dsn: str
) -> None:
    db.execute("truncate x_outbox")
    spec = basic_jobs.add.call(2, 3).spec()
    with pytest.raises(RuntimeError), db.transaction():
        outbox_db.outbox_stage(db, basic_jobs.add.call(9, 9).spec())
        raise RuntimeError("the caller's transaction rolls back")
    with db.transaction():
        outbox_id = outbox_db.outbox_stage(db, spec)
    claimed = wait_for(
        lambda: outbox_db.outbox_claim(db, 10), what="the staged row to be claimable"
    )
    assert isinstance(claimed, list) and [(r.outbox_id, r.spec.id) for r in claimed] == [
        (outbox_id, spec.id)
    ]
    assert claimed[0].spec.name == spec.name
    assert json.loads(claimed[0].spec.input_json) == json.loads(spec.input_json)
    outbox_db.outbox_mark(db, [outbox_id])
    assert outbox_db.outbox_claim(db, 10) == []
    assert outbox_db.outbox_publish(db, claimed[0].spec, None) is True
    assert outbox_db.outbox_publish(db, claimed[0].spec, None) is False  # a replay inserts nothing
    assert db.execute("select state from x_jobs where id = %s", (spec.id,)).fetchone() == ("ready",)


def test_one_relay_holds_the_outbox_lock_at_a_time(dsn: str) -> None:
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        with first.transaction():
            assert outbox_db.outbox_relay_lock(first) is True
            with second.transaction():
                assert outbox_db.outbox_relay_lock(second) is False
        with second.transaction():
            assert outbox_db.outbox_relay_lock(second) is True  # released with the transaction


def _finished(db: Any, client: Client, state: str, age: timedelta) -> uuid.UUID:
    ref = basic_jobs.add.configure(client=client).enqueue(1, 1)
    db.execute(
        "update x_jobs set state = %s, finished_at = now() - %s where id = %s", (state, age, ref.id)
    )
    return ref.id


def test_purge_deletes_only_finished_rows_older_than_the_cutoff_a_batch_at_a_time(
    client: Client, db: Any
) -> None:
    old = [_finished(db, client, "done", timedelta(days=9)) for _ in range(3)]
    fresh = _finished(db, client, "dead", timedelta(minutes=1))
    live = basic_jobs.add.configure(client=client).enqueue(1, 1).id
    cutoff = datetime.now(UTC) - timedelta(days=1)
    assert retention.purge_jobs(db, PurgeBatch(cutoff, 2)) == 2  # bounded by the limit
    assert retention.purge_jobs(db, PurgeBatch(cutoff, 2)) == 1
    left = {r[0] for r in db.execute("select id from x_jobs").fetchall()}
    assert left == {fresh, live} and not left & set(old)


def test_purge_of_job_counts_deletes_only_minutes_older_than_the_cutoff(db: Any) -> None:
    db.execute(
        "insert into x_job_counts (minute, queue, backend, done, dead) values"
        " (date_trunc('minute', now() - interval '9 days'), 'q', 1, 5, 1),"
        " (date_trunc('minute', now() - interval '9 days'), 'q', 2, 5, 0),"
        " (date_trunc('minute', now()), 'q', 1, 3, 0)"
    )
    cutoff = datetime.now(UTC) - timedelta(days=1)
    assert retention.purge_job_counts(db, PurgeBatch(cutoff, 1)) == 1  # bounded by the limit
    assert retention.purge_job_counts(db, PurgeBatch(cutoff, 100)) == 1
    assert db.execute("select done from x_job_counts").fetchall() == [(3,)]
    db.execute(
        "insert into x_job_failure_counts (minute, queue, backend, kind, jobs) values"
        " (date_trunc('minute', now() - interval '9 days'), 'q', 1, 'FAILURE', 1),"
        " (date_trunc('minute', now() - interval '9 days'), 'q', 1, 'OTHER', 1),"
        " (date_trunc('minute', now()), 'q', 1, 'FAILURE', 2)"
    )
    assert retention.purge_job_failure_counts(db, PurgeBatch(cutoff, 1)) == 1  # bounded
    assert retention.purge_job_failure_counts(db, PurgeBatch(cutoff, 100)) == 1
    assert db.execute("select jobs from x_job_failure_counts").fetchall() == [(2,)]


def test_purge_of_events_outbox_and_fires_keeps_what_must_stay(client: Client, db: Any) -> None:
    db.execute("truncate x_outbox, x_scheduler_fires")
    db.execute(
        "insert into x_job_events (event, correlation_key, created_at) values ('e', 'old', now() - interval '9 days'), ('e', 'new', now())"
    )
    cutoff = datetime.now(UTC) - timedelta(days=1)
    assert retention.purge_events(db, PurgeBatch(cutoff, 100)) == 1
    assert db.execute("select correlation_key from x_job_events").fetchall() == [("new",)]

    with db.transaction():
        staged = outbox_db.outbox_stage(db, basic_jobs.add.call(1, 1).spec())
        waiting = outbox_db.outbox_stage(db, basic_jobs.add.call(2, 2).spec())
    db.execute(
        "update x_outbox set published_at = now() - interval '9 days' where id = %s", (staged,)
    )
    assert retention.purge_outbox(db, PurgeBatch(cutoff, 100)) == 1  # the unpublished row stays
    assert db.execute("select id from x_outbox").fetchall() == [(waiting,)]

    task, at = _group(), datetime(2026, 1, 1, tzinfo=UTC)
    for hour in range(3):
        sched.scheduler_fire(db, FireParams(task, at + timedelta(hours=hour), False, ()))
    db.execute(
        "update x_scheduler_fires set fired_at = now() - interval '9 days' where task = %s", (task,)
    )
    assert retention.purge_fires(db, PurgeBatch(cutoff, 100)) == 2  # each task's latest stays
    assert sched.last_fires(db)[task][0] == at + timedelta(hours=2)


def test_session_statements_listen_set_commit_modes_and_read_the_database_clock(
    dsn: str, db: Any
) -> None:
    before = datetime.now(UTC)
    assert abs(session.database_now(db) - before) < timedelta(seconds=30)
    with psycopg.connect(dsn, autocommit=True) as conn:
        session.listen_for_jobs(conn)
        db.execute(
            "select pg_notify('x_jobs_ready', 'basic'), pg_notify('x_jobs_cancel', 'some-id')"
        )
        got = [(n.channel, n.payload) for n in conn.notifies(timeout=5, stop_after=2)]
        assert got == [("x_jobs_ready", "basic"), ("x_jobs_cancel", "some-id")]
        session.claims_commit_async(conn)
        assert conn.execute("show synchronous_commit").fetchone() == ("off",)
        with conn.transaction():
            session.outcomes_commit_durable(conn)
            assert conn.execute("show synchronous_commit").fetchone() == ("on",)
        assert conn.execute("show synchronous_commit").fetchone() == ("off",)  # local to it
    name = db.execute("select current_database()").fetchone()[0]
    assert session.ensure_ujobs_database(db, name) is False  # it exists: nothing is created
