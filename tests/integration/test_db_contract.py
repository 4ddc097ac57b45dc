"""The rest of the engine's ``db`` surface, function by function, against real Postgres: the job
writes and reads ``jobs`` shows, the step and event statements, the schema runner and the
connection policy. ``test_driver_contract.py`` holds the claim/lease/fencing half.

Each test names the promise a caller relies on; together with that file every public function of
``ujobs_bridge._internal.db`` is exercised here (``test_every_db_function_has_a_contract_test``).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from waiting_support import waiting_for

from apps import basic_jobs
from conftest import ADMIN_DSN
from ujobs_bridge._internal.db import claim_table, connections, schema
from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db import job_reads as reads_db
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db import steering as steering_db
from ujobs_bridge._internal.db import steps as steps_db
from ujobs_bridge._internal.db import testing as testing_db
from ujobs_bridge._internal.db import unclaimed as unclaimed_db
from ujobs_bridge._internal.db.far_instants import FarInstant, tolerate_far_instants
from ujobs_bridge._internal.db.steps import Lease, StepResult
from ujobs_bridge.errors import ErrorCode, JobStateError, SchemaError
from ujobs_bridge.records import JobState, Settlement

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent
NAME = "contract.job"


def spec(**over: Any) -> enqueue_db.EnqueueSpec:
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "name": NAME,
        "queue": "contract",
        "input_json": json.dumps({"args": [1], "kwargs": {}}),
        "max_attempts": 2,
    }
    values.update(over)
    return enqueue_db.EnqueueSpec(**values)


def claim_one(db: psycopg.Connection[Any]) -> Any:
    (got,) = leases_db.job_claim(
        db,
        leases_db.ClaimParams(
            queue="contract", names=[NAME], limit=1, token=uuid.uuid4(), lease_s=30, worker="t"
        ),
    )
    return got


def test_enqueue_inserts_once_and_a_live_key_answers_with_its_holder(db: Any) -> None:
    first = enqueue_db.job_enqueue(db, spec(idempotency_key="k1"), None)
    again = enqueue_db.job_enqueue(db, spec(idempotency_key="k1"), None)
    assert not first.existing and again.existing and again.id == first.id
    many = enqueue_db.job_enqueue_many(
        db, [spec(), spec(idempotency_key="k1"), spec(delay_s=60.0)], None
    )
    assert [r.existing for r in many] == [False, True, False] and many[1].id == first.id
    record = reads_db.job_get(db, many[2].id)
    assert record is not None and record.state is JobState.READY
    assert record.run_at - record.created_at >= timedelta(seconds=59)


@pytest.mark.parametrize("way", ["direct", "cursor", "definer"])
def test_an_own_enqueue_answers_as_job_enqueue_in_one_statement(
    dsn: str, db: Any, way: str
) -> None:
    """``OwnEnqueues`` (a client's one-by-one enqueue): through libpq directly, through the
    cursor (prepared statements off, as behind PgBouncer) and as a producer role sends (through
    x_jobs_insert), the same answers: a new job; the live holder of a key, as ``existing``; a
    new job once the holder finished; an id that exists refused; the due time and expiry from
    the delay."""
    own = enqueue_db.OwnEnqueues()
    own.definer = way == "definer"
    prepare = None if way == "cursor" else 5
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=prepare) as conn:
        first = own.enqueue(conn, spec(idempotency_key="own"), None, None)
        again = own.enqueue(conn, spec(idempotency_key="own"), None, "off")
        assert not first.existing and again.existing and again.id == first.id
        db.execute("update x_jobs set state = 'done' where id = %s", (first.id,))
        fresh = own.enqueue(conn, spec(idempotency_key="own"), None, None)
        assert not fresh.existing and fresh.id != first.id
        taken = spec()
        own.enqueue(conn, taken, None, None)
        with pytest.raises(JobStateError):
            own.enqueue(conn, taken, None, None)
        later = own.enqueue(conn, spec(delay_s=60.0, expires_in_s=30.0), None, "local")
        level = conn.execute("select current_setting('synchronous_commit')").fetchone()
        assert level == ("on",)  # the level chosen ended with the send's own transaction
    record = reads_db.job_get(db, later.id)
    assert record is not None and record.state is JobState.READY
    assert record.run_at - record.created_at == timedelta(seconds=60)
    assert record.expires_at is not None
    assert record.expires_at - record.run_at == timedelta(seconds=30)
    assert db.execute("select count(*) from x_jobs").fetchone() == (4,)


def test_set_send_commit_lasts_as_long_as_the_transaction(dsn: str) -> None:
    """``set_send_commit`` (an ``enqueue_many`` through the pool): the level for the rest of the
    open transaction only; None sets nothing."""
    with psycopg.connect(dsn) as conn:
        enqueue_db.set_send_commit(conn, "off")
        assert conn.execute("show synchronous_commit").fetchone() == ("off",)
        conn.commit()
        assert conn.execute("show synchronous_commit").fetchone() == ("on",)
        enqueue_db.set_send_commit(conn, None)
        assert conn.execute("show synchronous_commit").fetchone() == ("on",)


def test_settle_then_claim_writes_outcomes_and_claims_in_one_transaction(db: Any) -> None:
    a, b = enqueue_db.job_enqueue_many(db, [spec(), spec()], None)
    running = claim_one(db)
    done = Settlement(running.id, running.lease_token, state=JobState.DONE, output_json="7")
    matched, claimed = leases_db.job_settle_then_claim(
        db,
        [done],
        leases_db.ClaimParams(
            queue="contract", names=[NAME], limit=5, token=uuid.uuid4(), lease_s=30, worker="t"
        ),
        durable=True,
    )
    assert matched == {running.id} and [c.id for c in claimed] == [
        ({a.id, b.id} - {running.id}).pop()
    ]
    states = leases_db.job_states(db, [a.id, b.id])
    assert {s for s, _ in states.values()} == {JobState.DONE, JobState.RUNNING}
    assert states[claimed[0].id][1] == claimed[0].lease_token


def test_expire_cancels_only_jobs_past_their_expiry_that_never_ran(db: Any) -> None:
    now = datetime.now(UTC)
    stale = enqueue_db.job_enqueue(
        db, spec(expires_at=now - timedelta(seconds=1), run_at=now - timedelta(seconds=5)), None
    )
    fresh = enqueue_db.job_enqueue(db, spec(expires_at=now + timedelta(hours=1)), None)
    assert leases_db.job_expire(db, limit=10, error="UJ_JOB_EXPIRED: late", now=None) == [stale.id]
    gone, kept = reads_db.job_get(db, stale.id), reads_db.job_get(db, fresh.id)
    assert gone is not None and gone.state is JobState.CANCELLED and gone.finished_at is not None
    assert kept is not None and kept.state is JobState.READY


def test_cancel_then_requeue_gives_fresh_attempts_and_reads_show_it(db: Any) -> None:
    ref = enqueue_db.job_enqueue(db, spec(), None)
    assert steering_db.job_cancel(db, ref.id, "UJ_JOB_CANCELLED: by hand")
    assert not steering_db.job_cancel(db, ref.id, "again")  # only a live job can be cancelled
    assert steering_db.job_requeue(db, ref.id, None)
    record = reads_db.job_get(db, ref.id)
    assert record is not None and (record.state, record.attempt) == (JobState.READY, 0)
    assert [
        r.id for r in reads_db.job_list(db, state="ready", queue="contract", name=NAME, limit=5)
    ] == [ref.id]
    assert reads_db.job_list(db, state="dead", queue=None, name=None, limit=5) == []


def test_like_literal_and_paged_filtered_lists(db: Any) -> None:
    assert reads_db.like_literal("a_b%c\\") == "a\\_b\\%c\\\\"
    odd = enqueue_db.job_enqueue(db, spec(name="a_b"), None)
    enqueue_db.job_enqueue(db, spec(name="axb"), None)
    assert [r.id for r in reads_db.job_list(db, state=None, queue=None, name="a_b", limit=5)] == [
        odd.id
    ]  # an exact name is not a pattern
    every = reads_db.job_list(db, state=None, queue=None, name=None, name_like="a%", limit=5)
    assert len(every) == 2
    second = reads_db.job_list(db, state=None, queue=None, name=None, limit=1, offset=1)
    assert [r.id for r in second] == [every[1].id]
    assert [
        r.id
        for r in reads_db.job_list(db, state=None, queue=None, name=None, ids=[odd.id], limit=5)
    ] == [odd.id]


def test_bulk_count_cancel_requeue_touch_exactly_the_matching_rows(db: Any) -> None:
    from ujobs_bridge._internal.db import bulk

    keep = enqueue_db.job_enqueue(db, spec(queue="other"), None)
    enqueue_db.job_enqueue_many(db, [spec(name="bulk.x"), spec(name="bulk.y")], None)
    where = bulk.JobFilter(queue="contract", name_like="bulk.%")
    assert bulk.job_count_matching(db, where, bulk.CANCELLABLE) == 2
    db.execute("listen x_jobs_cancel")
    assert bulk.job_cancel_matching(db, where, "UJ_JOB_CANCELLED: bulk") == 2
    assert len(list(db.notifies(timeout=1, stop_after=2))) == 2  # running bodies are told
    assert bulk.job_count_matching(db, where, bulk.CANCELLABLE) == 0
    assert bulk.job_count_matching(db, where, bulk.REQUEUEABLE) == 2
    record = reads_db.job_get(db, keep.id)
    assert record is not None and record.state is JobState.READY
    keyed = enqueue_db.job_enqueue(db, spec(name="bulk.k", idempotency_key="kk"), None)
    assert steering_db.job_cancel(db, keyed.id, "x")
    enqueue_db.job_enqueue(db, spec(name="live.k", idempotency_key="kk"), None)  # holds the key now
    assert bulk.job_requeue_matching(db, where, None) == 2  # the keyed one is skipped
    assert bulk.job_count_matching(db, bulk.JobFilter(state="cancelled"), bulk.REQUEUEABLE) == 1
    enqueue_db.job_enqueue(db, spec(), None)
    running = claim_one(db)
    dead = Settlement(running.id, running.lease_token, state=JobState.DEAD, error="boom")
    assert leases_db.job_settle(db, [dead], None) == {running.id}
    assert bulk.job_discard_matching(db, bulk.JobFilter(queue="contract")) == 1  # dead rows only
    assert reads_db.job_get(db, running.id) is None
    assert bulk.job_discard_matching(db, bulk.JobFilter(queue="contract")) == 0


def test_observe_reads_depth_throughput_and_outbox_lag_at_an_injected_now(db: Any) -> None:
    from ujobs_bridge._internal.db import observe

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    due = now - timedelta(minutes=3)
    enqueue_db.job_enqueue_many(
        db,
        [
            spec(run_at=due),
            spec(run_at=now - timedelta(minutes=1)),
            spec(run_at=now + timedelta(hours=1)),
        ],
        now,
    )
    running = claim_one(db)  # the oldest due one (claims at the database's now)
    finished = Settlement(running.id, running.lease_token, state=JobState.DONE)
    assert leases_db.job_settle(db, [finished], now) == {running.id}
    depth = {(d.queue, d.state): (d.jobs, d.oldest_due) for d in observe.observe_depth(db, now)}
    assert depth == {
        ("contract", "ready"): (1, now - timedelta(minutes=1)),
        ("contract", "scheduled"): (1, None),
    }
    per_minute = observe.observe_finished_per_minute(db, 60, None)
    assert [(m.state, m.jobs) for m in per_minute] == [("done", 1)]
    assert observe.observe_finished_per_minute(db, 60, now - timedelta(days=1)) == []
    assert observe.observe_outbox_lag(db, None) == (0, 0.0)
    # the claim counted its pick-up (due: created_at, later than run_at), the settle its attempt
    picked = observe.observe_pickup_per_minute(db, 60, None)
    assert [m.picked for m in picked] == [1] and 0 <= picked[0].mean_s <= picked[0].max_s < 60
    assert observe.observe_pickup_per_minute(db, 60, now - timedelta(days=1)) == []
    attempts = observe.observe_attempts(db, running.id)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "done")]
    assert attempts[0].claimed_at is not None and attempts[0].claimed_at <= attempts[0].finished_at


def test_observe_depth_counts_each_state_from_its_own_set_and_matches_the_table(db: Any) -> None:
    from ujobs_bridge._internal.db import observe

    now = datetime.now(UTC)

    def through(state: JobState | None, **settled: Any) -> Any:
        """A job enqueued, claimed and (unless ``state`` is None) settled to ``state``."""
        enqueue_db.job_enqueue(db, spec(run_at=now - timedelta(hours=2)), None)
        job = claim_one(db)
        if state is not None:
            done = Settlement(job.id, job.lease_token, state=state, **settled)
            assert leases_db.job_settle(db, [done], None) == {job.id}
        return job

    through(JobState.SLEEPING, run_at=now + timedelta(minutes=10))
    through(JobState.SLEEPING, run_at=now - timedelta(minutes=30))  # its sleep is over: due
    through(JobState.WAITING)  # for an event, no timeout
    through(JobState.DEAD, error="boom")
    through(JobState.DONE)
    cancelled = through(None)
    assert steering_db.job_cancel(db, cancelled.id, "UJ_JOB_CANCELLED: test")  # its lease row stays
    through(None)  # running
    enqueue_db.job_enqueue_many(
        db,
        [
            spec(run_at=now - timedelta(minutes=3)),
            spec(run_at=now - timedelta(minutes=1)),
            spec(run_at=now + timedelta(hours=1)),
        ],
        None,
    )
    depth = {(d.queue, d.state): (d.jobs, d.oldest_due) for d in observe.observe_depth(db, None)}
    assert depth == {
        ("contract", "ready"): (2, now - timedelta(minutes=30)),  # oldest claimable and due
        ("contract", "scheduled"): (1, None),
        ("contract", "sleeping"): (2, None),
        ("contract", "waiting"): (1, None),
        ("contract", "running"): (1, None),
        ("contract", "dead"): (1, None),
    }
    table = db.execute(
        "select case when state = 'ready' and run_at > now() then 'scheduled' else state end,"
        " count(*) from x_jobs where state not in ('done', 'cancelled') group by 1"
    ).fetchall()
    assert {("contract", s): n for s, n in table} == {k: v[0] for k, v in depth.items()}


def test_every_way_a_job_ends_done_or_dead_is_counted_per_minute(db: Any) -> None:
    """A dead letter and a package's own failure (a failure kind) are counted apart, so the
    dashboard's chart shows FAILURE apart from the dead letters, as every other view does."""
    from ujobs_bridge._internal.dashboard.views import chart
    from ujobs_bridge._internal.db import observe

    enqueue_db.job_enqueue_many(db, [spec(), spec(), spec(), spec()], None)
    first, second, third, fourth = claim_one(db), claim_one(db), claim_one(db), claim_one(db)
    settled = [
        Settlement(first.id, first.lease_token, state=JobState.DONE),
        Settlement(second.id, second.lease_token, state=JobState.DEAD, error="boom"),
        Settlement(third.id, third.lease_token, state=JobState.DEAD, error="no", failure_kind="FAILURE"),
    ]  # fmt: skip
    assert leases_db.job_settle(db, settled, None) == {first.id, second.id, third.id}
    failure = Settlement(fourth.id, fourth.lease_token, state=JobState.DEAD, failure_kind="FAILURE")
    assert leases_db.job_settle(db, [failure], None) == {fourth.id}  # the same row, added to
    enqueue_db.job_enqueue(db, spec(max_attempts=1), None)
    lost = claim_one(db)  # its last attempt: the rescue dead-letters it
    db.execute("update x_jobs set lease_expires_at = now() - interval '1 second' where id = %s",
               (lost.id,))  # fmt: skip
    assert leases_db.job_rescue(db, limit=10, error="UJ_WORKER_LOST: gone", now=None) == [
        (lost.id, JobState.DEAD)
    ]
    enqueue_db.job_enqueue(db, spec(name="nobody.declares"), None)
    unknown = unclaimed_db.DeadUnregisteredParams(
        "contract", [NAME], 0, 10, "UJ_UNREGISTERED: {name}"
    )
    assert [n for _, n in unclaimed_db.job_dead_unregistered(db, unknown)] == ["nobody.declares"]
    assert leases_db.job_settle(db, settled[:1], None) == set()  # a stale settle counts nothing
    per_minute = observe.observe_finished_per_minute(db, 60, None)
    totals: dict[str, int] = {}
    for m in per_minute:
        totals[m.state] = totals.get(m.state, 0) + m.jobs
    assert totals == {"done": 1, "dead": 3, "FAILURE": 2}
    finished = db.execute(
        "select coalesce(failure_kind, state), count(*) from x_jobs"
        " where finished_at is not null group by 1"
    ).fetchall()
    assert dict(finished) == totals
    now = db.execute("select now()").fetchone()[0]
    drawn = chart(db, now)
    assert (drawn.total_done, drawn.total_dead, drawn.total_failed) == (1, 3, {"FAILURE": 2})
    assert [b.label.split(": ")[1] for b in drawn.dead] == ["3 dead letters"]
    assert [b.label.split(": ")[1] for b in drawn.failed] == ["2 FAILURE"]


def test_dead_letters_and_stats_per_queue_and_state(db: Any) -> None:
    enqueue_db.job_enqueue_many(db, [spec(), spec(), spec(queue="other")], None)
    running = claim_one(db)
    dead = Settlement(running.id, running.lease_token, state=JobState.DEAD, error="boom")
    assert leases_db.job_settle(db, [dead], None) == {running.id}
    assert [r.id for r in reads_db.job_dead(db, limit=5)] == [running.id]
    stats = {(s.queue, s.state): s.jobs for s in reads_db.job_stats(db)}
    assert stats == {
        ("contract", JobState.READY): 1,
        ("contract", JobState.DEAD): 1,
        ("other", JobState.READY): 1,
    }


def test_step_writes_are_fenced_by_the_lease_and_listed_in_order(db: Any) -> None:
    enqueue_db.job_enqueue(db, spec(), None)
    job = claim_one(db)
    lease = Lease(job.id, job.lease_token, job.attempt)
    stranger = Lease(job.id, uuid.uuid4(), job.attempt)
    started = datetime.now(UTC)
    assert steps_db.lease_held(db, lease) and not steps_db.lease_held(db, stranger)

    def complete(*results: tuple[Lease, str, int, str]) -> set[tuple[Any, str]]:
        return steps_db.steps_complete(db, [StepResult(*r, started) for r in results])

    assert complete((stranger, "a", 0, "1")) == set()  # fenced: nothing written
    assert complete((lease, "a", 0, "1")) == {(job.id, "a")}
    assert complete((lease, "a", 0, "2")) == set()  # already completed: kept
    assert steps_db.step_fail(db, lease, "b", 1, "went wrong", started)
    # one statement, many results: each fenced on its own, a failed step completed on retry
    name = 'quote " and \\ and é'
    written = complete(
        (lease, "b", 1, '{"n": [1, 2]}'), (stranger, "c", 2, "3"), (lease, name, 3, '"x"')
    )
    assert written == {(job.id, "b"), (job.id, name)}
    listed = steps_db.step_list(db, job.id)
    assert [(s.name, s.status, s.output) for s in listed] == [
        ("a", "completed", 1),
        ("b", "completed", {"n": [1, 2]}),
        (name, "completed", "x"),
    ]
    assert listed[1].attempts == 2 and listed[1].error is None


def test_a_sleeping_step_wakes_only_once_due(db: Any) -> None:
    enqueue_db.job_enqueue(db, spec(), None)
    job = claim_one(db)
    lease = Lease(job.id, job.lease_token, job.attempt)
    now = datetime.now(UTC)
    written, wake = steps_db.step_suspend(
        db,
        lease,
        "nap",
        0,
        status="sleeping",
        wake_at=None,
        duration_s=60,
        event=None,
        correlation_key=None,
        now=now,
    )
    assert written and wake == now + timedelta(seconds=60)
    assert not steps_db.step_wake_if_due(db, lease, "nap", now + timedelta(seconds=59))
    assert steps_db.step_wake_if_due(db, lease, "nap", now + timedelta(seconds=60))


def test_an_event_sent_before_the_wait_is_consumed_once_by_one_step(db: Any) -> None:
    enqueue_db.job_enqueue(db, spec(), None)
    job = claim_one(db)
    lease = Lease(job.id, job.lease_token, job.attempt)
    event_id, woken = steps_db.event_send(db, "paid", "order-1", json.dumps({"cents": 5}), None)
    assert event_id >= 1 and woken == 0  # the stored event's id (identities survive a reset)
    started = datetime.now(UTC)
    args: dict[str, Any] = {
        "event": "paid",
        "correlation_key": "order-1",
        "retention_s": 3600,
        "started_at": started,
        "now": None,
    }
    assert steps_db.event_take(db, lease, "wait", 0, **args) == ("event", {"cents": 5})
    assert steps_db.event_take(db, lease, "wait", 0, **args) == ("event", {"cents": 5})  # replay
    assert steps_db.event_take(db, lease, "other", 1, **args) == ("none", None)  # consumed once
    assert steps_db.event_take(db, Lease(job.id, uuid.uuid4(), 1), "x", 2, **args) == ("lost", None)


def test_the_schema_runner_reports_and_refuses_what_is_missing(dsn: str) -> None:
    shipped = schema.available()
    parts = [s.name for s in schema.sets()]
    assert parts[0] == schema.ENGINE  # the engine's part first, then the packages above it
    for part in parts:  # each part numbered from 0001 without a gap
        versions = [m.version for m in shipped if m.part == part]
        assert versions == list(range(1, len(versions) + 1)), part
    assert schema.check(dsn) == [] and schema.upgrade(dsn) == []  # already current: no-op
    schema.require_current(dsn)
    with connections.connect(dsn, connections.Role("test")) as conn:
        assert sorted((a.part, a.version) for a in schema.applied(conn)) == sorted(
            (m.part, m.version) for m in shipped
        )


def test_an_empty_database_is_refused_until_upgraded(pg_dsn: str) -> None:
    from conftest import ADMIN_DSN, _dsn_for

    name = f"ujb_contract_{uuid.uuid4().hex[:8]}"
    with connections.connect(ADMIN_DSN, connections.Role("test")) as admin:
        testing_db.database_create(admin, name)
    dsn = _dsn_for(name)
    try:
        with pytest.raises(SchemaError):
            schema.require_current(dsn)
        assert len(schema.check(dsn)) == len(schema.available())
        assert schema.upgrade(dsn) == schema.available()
        schema.require_current(dsn)
    finally:
        with connections.connect(ADMIN_DSN, connections.Role("test")) as admin:
            testing_db.database_drop(admin, name)


def test_grant_gives_a_role_row_privileges_on_every_x_table_and_refuses_an_unknown_role(
    dsn: str,
) -> None:
    role = f"ujb_contract_{uuid.uuid4().hex[:8]}"
    with connections.connect(ADMIN_DSN, connections.Role("test")) as admin:
        admin.execute(psycopg.sql.SQL("create role {}").format(psycopg.sql.Identifier(role)))
    try:
        granted = schema.grant(dsn, role).relations
        assert {"x_jobs", "x_job_steps", "x_schema_version"} <= set(granted)
        # every part's tables: celery_compat's and migrate's too
        assert {"x_celery_tasks", "x_rate_limits", "x_migrate_quarantine"} <= set(granted)
        assert schema.grant(dsn, role).relations == granted  # idempotent
        with connections.connect(dsn, connections.Role("test")) as conn:
            row = conn.execute(
                "select has_table_privilege(%(r)s, 'x_jobs', 'update'),"
                " has_table_privilege(%(r)s, 'x_jobs', 'truncate')",
                {"r": role},
            ).fetchone()
        assert row == (True, False)
        with pytest.raises(SchemaError) as unknown:
            schema.grant(dsn, f"{role}_missing")
        assert unknown.value.code == ErrorCode.ROLE_NOT_FOUND
    finally:
        with connections.connect(dsn, connections.Role("test")) as conn:
            conn.execute(psycopg.sql.SQL("drop owned by {}").format(psycopg.sql.Identifier(role)))
        with connections.connect(ADMIN_DSN, connections.Role("test")) as admin:
            admin.execute(psycopg.sql.SQL("drop role {}").format(psycopg.sql.Identifier(role)))


def test_a_pool_follows_the_connection_policy(dsn: str) -> None:
    role = connections.Role("contract:pool", idle_in_transaction_ms=1500)
    pool = connections.pool(dsn, role, min_size=1, max_size=2)
    try:
        with pool.connection() as conn:
            name, timeout = conn.execute(
                "select current_setting('application_name'), current_setting('idle_in_transaction_session_timeout')"
            ).fetchone() or ("", "")
            assert (name, timeout, conn.autocommit) == ("ujobs:contract:pool", "1500ms", True)
    finally:
        pool.close()


def _ended(db: Any, conn: psycopg.Connection[Any]) -> None:
    """``pg_terminate_backend`` on ``conn``'s session, returning once it is gone."""
    from conftest import wait_for

    pid = conn.info.backend_pid
    db.execute("select pg_terminate_backend(%s)", (pid,))
    wait_for(
        lambda: (
            db.execute(
                "select count(*) from pg_stat_activity where datname = current_database() and pid = %s",
                (pid,),
            ).fetchone()
            == (0,)
        ),
        what="the session to end",
    )


def test_transient_tells_the_infrastructures_errors_from_the_statements(dsn: str, db: Any) -> None:
    role = connections.Role("contract:transient")
    with connections.connect(dsn, role) as conn:
        _ended(db, conn)
        with pytest.raises(psycopg.Error) as ended:
            conn.execute("select 1")
    assert connections.transient(ended.value)  # AdminShutdown
    with pytest.raises(psycopg.Error) as refused:
        connections.connect(psycopg.conninfo.make_conninfo(dsn, port="1"), role)
    assert connections.transient(refused.value)  # nobody listens: connection refused
    with connections.connect(dsn, role) as conn:
        with pytest.raises(psycopg.Error) as division:
            conn.execute("select 1 / 0")
        with pytest.raises(psycopg.Error) as missing:
            conn.execute("select 1 from no_such_table")
    assert not connections.transient(division.value)
    assert not connections.transient(missing.value)
    assert not connections.transient(ValueError("not a database error"))


def test_check_refuses_a_connection_the_server_ended_and_pools_replace_it(
    dsn: str, db: Any
) -> None:
    role = connections.Role("contract:check")
    with connections.connect(dsn, role) as conn:
        connections.check(conn)  # alive: no round trip, no error
        _ended(db, conn)
        with pytest.raises(psycopg.OperationalError):
            connections.check(conn)
    pool = connections.pool(dsn, role, min_size=1, max_size=1)
    try:
        with pool.connection() as first:
            _ended(db, first)
        with pool.connection() as second:  # the dead one is never handed out
            assert second.execute("select 1").fetchone() == (1,)
    finally:
        pool.close()


def test_check_works_on_a_descriptor_above_1023(dsn: str, db: Any) -> None:
    """A process with many files open (a web server) gets sockets numbered above 1,023, which
    ``select()`` refuses; the checkout check polls instead."""
    held = [os.open(os.devnull, os.O_RDONLY)]  # not fd 0: CI may run with no standard input
    try:
        while held[-1] < 1100:
            held.append(os.dup(held[0]))
        with connections.connect(dsn, connections.Role("contract:fd")) as conn:
            assert conn.fileno() > 1023
            connections.check(conn)
            _ended(db, conn)
            with pytest.raises(psycopg.OperationalError):
                connections.check(conn)
    finally:
        for fd in held:
            os.close(fd)


def test_retrying_retries_transient_errors_only(dsn: str, db: Any) -> None:
    role = connections.Role("contract:retrying")
    stale = connections.connect(dsn, role)
    _ended(db, stale)
    calls: list[str] = []

    def op() -> Any:
        calls.append("call")
        if len(calls) == 1:
            return stale.execute("select 1").fetchone()  # AdminShutdown: retried
        with connections.connect(dsn, role) as fresh:
            return fresh.execute("select 2").fetchone()

    assert connections.retrying(op, within_s=10) == (2,) and len(calls) == 2
    stale.close()
    with connections.connect(dsn, role) as conn:
        calls.clear()

        def bad() -> Any:
            calls.append("call")
            return conn.execute("select 1 / 0").fetchone()

        with pytest.raises(psycopg.errors.DivisionByZero):
            connections.retrying(bad, within_s=10)
    assert len(calls) == 1


def test_enqueue_on_an_async_connection_joins_its_transaction(dsn: str, db: Any) -> None:
    import asyncio

    async def run() -> tuple[Any, Any]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            kept = await enqueue_db.job_enqueue_async(conn, spec(idempotency_key="async"), None)
            await conn.commit()
            await enqueue_db.job_enqueue_async(conn, spec(), None)
            await conn.rollback()  # the caller's transaction decides
            again = await enqueue_db.job_enqueue_async(conn, spec(idempotency_key="async"), None)
            await conn.commit()
            return kept, again

    kept, again = asyncio.run(run())
    assert again.existing and again.id == kept.id
    assert db.execute("select count(*) from x_jobs").fetchone() == (1,)


def test_the_test_kits_statements_claim_by_id_count_due_jobs_and_empty_the_tables(db: Any) -> None:
    later = enqueue_db.job_enqueue(db, spec(delay_s=3600.0), None)
    due = testing_db.DueJobs(queues=["contract"], names=[NAME], now=None)
    assert testing_db.jobs_due(db, due) == 0  # not due for an hour
    claim = testing_db.ClaimById(
        id=later.id, token=uuid.uuid4(), lease_s=30, worker="kit", now=None
    )
    got = testing_db.job_claim_by_id(db, claim)  # by id, whatever its run_at
    assert got is not None and (got.id, got.attempt) == (later.id, 1)
    assert testing_db.job_claim_by_id(db, claim) is None  # running: not claimable again
    testing_db.tables_empty(db)
    assert db.execute("select count(*) from x_jobs").fetchone() == (0,)
    assert schema.applied(db)  # the schema record stays


def test_jobs_no_worker_knows_are_found_dead_lettered_and_reported_as_stranded(db: Any) -> None:
    now = datetime.now(UTC)
    old = now - timedelta(minutes=5)
    enqueue_db.job_enqueue_many(
        db,
        [spec(name="gone.task", run_at=old), spec(name="gone.task", run_at=old), spec(run_at=old)],
        None,
    )
    enqueue_db.job_enqueue(db, spec(name="gone.task", queue="elsewhere", run_at=old), None)
    find = unclaimed_db.UnregisteredParams(
        queues=["contract"], names=[NAME], after_s=60, scan=1000, now=now
    )
    (backlog,) = unclaimed_db.job_unregistered(db, find)
    assert (backlog.queue, backlog.name, backlog.jobs) == ("contract", "gone.task", 2)
    assert backlog.oldest_s >= 299
    assert (
        unclaimed_db.job_unregistered(
            db, unclaimed_db.UnregisteredParams(["contract"], [NAME], 600, 1000, now)
        )
        == []
    )
    stranded = {
        (s.queue, s.name): s.jobs for s in unclaimed_db.job_stranded(db, after_s=60, now=now)
    }
    assert stranded == {
        ("contract", "gone.task"): 2,
        ("contract", NAME): 1,
        ("elsewhere", "gone.task"): 1,
    }
    dead = unclaimed_db.DeadUnregisteredParams(
        queue="contract",
        names=[NAME],
        after_s=60,
        limit=10,
        error="UJ_TASK_UNREGISTERED: {name}",
        now=now,
    )
    assert sorted(name for _, name in unclaimed_db.job_dead_unregistered(db, dead)) == [
        "gone.task",
        "gone.task",
    ]
    assert [r.last_error for r in reads_db.job_dead(db, limit=5)] == [
        "UJ_TASK_UNREGISTERED: gone.task"
    ] * 2


def test_every_db_function_has_a_contract_test() -> None:
    """A new public function in ``ujobs_bridge/db`` without a test here or in the sibling files
    fails: the db surface is the seam every other layer trusts."""
    contract = "\n".join(
        (TESTS / name).read_text()
        for name in (
            "test_db_contract.py",
            "test_db_contract_presence.py",
            "test_driver_contract.py",
            "test_testing_kit.py",
            "test_schema_parts.py",
            "../slow/test_infra_errors.py",
        )
    )
    missing = []
    for path in sorted((ROOT / "ujobs_bridge" / "_internal" / "db").glob("*.py")):
        if path.name == "sql.py":  # the statement loader: tests/test_guards.py tests it
            continue
        for node in ast.parse(path.read_text()).body:
            public = isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef
            ) and not node.name.startswith("_")
            if public and f"{node.name}(" not in contract:
                missing.append(f"{path.name}:{node.name}")
    assert not missing, f"db functions with no contract test: {missing}"


def test_claim_plans_hold_for_their_transaction_only(dsn: str) -> None:
    """``claim_plans``: index scans only (no sequential or bitmap scan) until the transaction
    ends, so the worker's outcome writes plan as its claims do, and nothing stays on the
    session (behind PgBouncer, another client's)."""
    with connections.connect(dsn, connections.Role("contract:claim-plans")) as conn:
        with conn.transaction():
            leases_db.claim_plans(conn)
            shown = conn.execute(
                "select current_setting('enable_seqscan'), current_setting('enable_bitmapscan')"
            ).fetchone()
            assert shown == ("off", "off")
        shown = conn.execute(
            "select current_setting('enable_seqscan'), current_setting('enable_bitmapscan')"
        ).fetchone()
        assert shown == ("on", "on")


def test_claim_async_claims_in_its_own_transaction_and_leaves_no_session_setting(
    dsn: str, db: Any
) -> None:
    """The claim behind PgBouncer: the same rows ``job_claim`` takes, its commit asynchronous
    for that transaction only (a pooled server session must not keep the setting)."""
    from ujobs_bridge._internal.db import session

    enqueue_db.job_enqueue_many(db, [spec(), spec()], None)
    with connections.connect(dsn, connections.Role("contract:claim-async")) as conn:
        params = leases_db.ClaimParams(
            queue="contract", names=[NAME], limit=5, token=uuid.uuid4(), lease_s=30, worker="t"
        )
        claimed = leases_db.job_claim(conn, params, pooled=True)
        assert len(claimed) == 2 and all(c.lease_token == params.token for c in claimed)
        assert conn.execute("show synchronous_commit").fetchone() == ("on",)
        # the claim's plan settings (tx_claim_plans) end with its transaction as well
        assert conn.execute("show enable_seqscan").fetchone() == ("on",)
        assert conn.execute("show enable_bitmapscan").fetchone() == ("on",)
        assert leases_db.job_claim(conn, params, pooled=True) == []
        with conn.transaction():
            session.transaction_idle_limit(conn, 1500)
            assert conn.execute("show idle_in_transaction_session_timeout").fetchone() == (
                "1500ms",
            )
        assert conn.execute("show idle_in_transaction_session_timeout").fetchone() == ("0",)
    states = db.execute("select state from x_jobs").fetchall()
    assert states == [("running",), ("running",)]


def test_a_transaction_idle_limit_ends_a_transaction_left_idle(dsn: str, db: Any) -> None:
    """What the scheduler's fire transaction relies on behind PgBouncer (no session options):
    the server ends the transaction, not the caller."""
    from conftest import wait_for
    from ujobs_bridge._internal.db import session

    conn = connections.connect(dsn, connections.Role("contract:idle-limit"))
    pid = conn.info.backend_pid
    conn.execute("begin")
    session.transaction_idle_limit(conn, 200)
    wait_for(
        lambda: (
            db.execute(
                "select count(*) from pg_stat_activity where datname = current_database() and pid = %s",
                (pid,),
            ).fetchone()
            == (0,)
        ),
        timeout=30,
        what="the server to end the idle transaction",
    )
    with pytest.raises(psycopg.Error):  # IdleInTransactionSessionTimeout, then gone
        conn.execute("select 1")
    conn.close()


def test_behind_pgbouncer_connections_carry_no_session_state(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``UJOBS_PGBOUNCER=1`` (``use_pgbouncer``): no startup options, no server-side prepared
    statements, and LISTEN only on an explicit listen DSN."""
    monkeypatch.delenv(connections.ENV_PGBOUNCER, raising=False)
    monkeypatch.delenv(connections.ENV_LISTEN_URL, raising=False)
    role = connections.Role("contract:bouncer", idle_in_transaction_ms=1500)
    assert not connections.behind_pgbouncer() and "options" in role.kwargs()
    assert connections.listen_dsn(dsn) == dsn
    connections.use_pgbouncer(True)
    try:
        assert connections.behind_pgbouncer()
        assert "options" not in role.kwargs() and role.kwargs()["prepare_threshold"] is None
        assert connections.listen_dsn(dsn) is None  # the caller polls
        assert connections.listen_dsn(dsn, "host=direct") == "host=direct"
        monkeypatch.setenv(connections.ENV_LISTEN_URL, "host=env")
        assert connections.listen_dsn(dsn) == "host=env"
        with connections.connect(dsn, role) as conn:
            for _ in range(8):  # psycopg would prepare after 5 executions of one statement
                conn.execute("select 1 where %s::int = 1", (1,))
            prepared = conn.execute("select count(*) from pg_prepared_statements").fetchone()
            assert prepared == (0,)
    finally:
        connections.use_pgbouncer(False)
    assert not connections.behind_pgbouncer()


def test_pools_start_empty_and_give_idle_connections_back(
    dsn: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``min_size`` 0: a pool holds nothing until used, and closes a connection per
    ``pool_idle_s()`` (``UJOBS_POOL_IDLE_S``) it stayed unused."""
    from conftest import wait_for

    monkeypatch.setenv(connections.ENV_POOL_IDLE, "0.5")
    assert connections.pool_idle_s() == 0.5
    monkeypatch.setenv(connections.ENV_POOL_IDLE, "nonsense")
    assert connections.pool_idle_s() == connections.DEFAULT_POOL_IDLE_S
    monkeypatch.setenv(connections.ENV_POOL_IDLE, "0.5")
    role = connections.Role("contract:lazy")
    count = "select count(*) from pg_stat_activity where datname = current_database() and application_name = 'ujobs:contract:lazy'"
    pool = connections.pool(dsn, role, max_size=2)
    try:
        assert db.execute(count).fetchone() == (0,)
        with pool.connection() as conn:
            assert conn.execute("select 1").fetchone() == (1,)
        assert db.execute(count).fetchone() == (1,)
        wait_for(lambda: db.execute(count).fetchone() == (0,), timeout=30, what="the shrink")
    finally:
        pool.close()


def test_a_shared_connection_runs_one_users_block_at_a_time(dsn: str) -> None:
    """``Reconnecting.using``: a second thread's statement never lands inside the first one's
    transaction."""
    import threading

    shared = connections.Reconnecting(dsn, connections.Role("contract:shared"))
    inside = threading.Event()
    release = threading.Event()
    seen: list[Any] = []

    def other() -> None:
        inside.wait(10)
        with shared.using() as conn:
            seen.append(conn.info.transaction_status)

    thread = threading.Thread(target=other)
    thread.start()
    with shared.using() as conn, conn.transaction():
        conn.execute("select 1")
        inside.set()
        release.wait(0.2)  # the other thread is now blocked on the block, not in the transaction
        assert not seen
        waiter: list[BaseException] = []

        def impatient() -> None:
            try:
                with shared.using(wait_s=0.05):
                    pass
            except connections.Busy as exc:
                waiter.append(exc)

        third = threading.Thread(target=impatient)
        third.start()
        third.join(10)
        assert len(waiter) == 1 and connections.transient(waiter[0])
    thread.join(10)
    assert seen == [psycopg.pq.TransactionStatus.IDLE]
    shared.close()


def test_packed_arrays_are_read_by_the_server_as_the_lists_they_pack(db: Any) -> None:
    """``arrays``: what ``enqueue_many`` sends instead of psycopg's per-element dumping arrives
    as the same array (NULLs, non-ASCII text, repeated elements, and a column left to psycopg)."""
    from ujobs_bridge._internal.db import arrays

    arrays.register(db)
    ids = [uuid.uuid4() for _ in range(3)]
    row = db.execute(
        "select %(t)b::text[], %(u)b::uuid[], %(r)b::int[], %(f)b::float8[], %(n)s::int[],"
        " %(s)b::smallint[], %(mixed)s::int[]",
        {
            "t": arrays.texts(["a", None, "ünï"]),
            "u": arrays.uuids(ids),
            "r": arrays.repeated(arrays.INT4, 7, 3),
            "f": arrays.column("float8", (1.5, 1.5)),
            "n": arrays.column("int4", (None, None)),
            "s": arrays.column("int2", (3, 3)),
            "mixed": arrays.column("int4", (1, 2)),
        },
    ).fetchone()
    assert row == (["a", None, "ünï"], ids, [7, 7, 7], [1.5, 1.5], None, [3, 3], [1, 2])
    assert isinstance(arrays.column("text", ("x", "y")), arrays.Packed)
    assert isinstance(arrays.column("uuid", tuple(ids)), arrays.Packed)


def test_one_row_and_a_batch_insert_the_same_columns(db: Any) -> None:
    """``x_jobs_insert`` takes a single row by its own branch (0017): every column it writes,
    the wake-up and a taken key's answer match the set-based insert of a batch."""
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    shapes: list[dict[str, Any]] = [
        {"delay_s": 30.0, "expires_in_s": 60.0, "priority": 3, "tenant_id": "t1",
         "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "enqueued_by": "contract"},
        {"run_at": now + timedelta(hours=1), "expires_at": now + timedelta(days=1),
         "idempotency_key": "one-or-many"},
    ]  # fmt: skip
    columns = (
        "name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at, state,"
        " last_error, finished_at, tenant_id, traceparent, enqueued_by, claimable, live_key"
    )

    def row(job_id: uuid.UUID) -> tuple[Any, ...]:
        found = db.execute(f"select {columns} from x_jobs where id = %s", (job_id,)).fetchone()
        assert found is not None
        return tuple(found)

    waiting_for(db, "contract")  # a worker waits for the queue: the inserts wake it (0021)
    db.execute("listen x_jobs_ready")
    for shape in shapes:
        alone = spec(**shape)
        assert not enqueue_db.job_enqueue_many(db, [alone], now)[0].existing
        alone_row = row(alone.id)
        if shape.get("idempotency_key"):  # free the key for the batch
            db.execute("update x_jobs set state = 'done' where id = %s", (alone.id,))
        batch = [spec(**shape), spec()]
        assert not any(ref.existing for ref in enqueue_db.job_enqueue_many(db, batch, now))
        batch_row = row(batch[0].id)
        assert alone_row == batch_row
    notified = [n.payload for n in db.notifies(timeout=0.5, stop_after=4)]
    assert notified and set(notified) == {"contract"}
    taken = spec(idempotency_key="one-or-many")
    (answer,) = enqueue_db.job_enqueue_many(db, [taken], now)  # the live key answers, as in a batch
    assert answer.existing and answer.id != taken.id
    assert db.execute("select count(*) from x_jobs where id = %s", (taken.id,)).fetchone() == (0,)


def test_the_claim_table_vacuum_keeps_its_rows_and_counts_them(client: Any, db: Any) -> None:
    """The worker's vacuum of x_job_claimable (db/claim_table.py): allowed for the table's
    owner, it runs on an autocommit connection and leaves the claimable jobs as they were."""
    ref = basic_jobs.add.configure(client=client).enqueue(1, 2)
    assert claim_table.vacuum_allowed(db) is True

    def vacuums() -> int:
        db.execute("select pg_stat_clear_snapshot()")
        row = db.execute(
            "select vacuum_count from pg_stat_user_tables where relname = 'x_job_claimable'"
        ).fetchone()
        return int(row[0])

    before = vacuums()
    claim_table.vacuum(db)
    assert vacuums() == before + 1
    assert db.execute("select id from x_job_claimable").fetchall() == [(ref.id,)]
    db.execute("select pg_stat_clear_snapshot()")
    assert claim_table.live_rows(db) == 1  # counted by the vacuum it just ran


def test_a_direct_connection_is_not_taken_for_a_transaction_pooler(dsn: str) -> None:
    """``detect_transaction_pooler`` on a connection straight to the server: False, and the
    process keeps its session state (``sessions_pooled`` stays False)."""
    env_before = os.environ.pop(connections.ENV_PGBOUNCER, None)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert connections.detect_transaction_pooler(conn, dsn) is False
        assert connections.sessions_pooled() is False
    finally:
        if env_before is not None:
            os.environ[connections.ENV_PGBOUNCER] = env_before


POOLER_MET = """
import logging, sys
from ujobs_bridge._internal.db import connections
logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")
before = connections.sessions_pooled()
first, second = connections.pooler_met("a test"), connections.pooler_met("a test again")
print(before, first, second, connections.sessions_pooled())
connections.forget_pooler()
print(connections.sessions_pooled(), connections.Role("t").kwargs().get("prepare_threshold", 5))
"""


def test_a_pooler_met_undeclared_turns_session_state_off_once_and_says_the_fix() -> None:
    """``pooler_met`` in a process of its own (it changes the process for good): True the first
    time only, one log line naming ``--pgbouncer``, and ``sessions_pooled`` True until
    ``forget_pooler``."""
    env = {k: v for k, v in os.environ.items() if k != connections.ENV_PGBOUNCER}
    done = subprocess.run(
        [sys.executable, "-c", POOLER_MET], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["False True False True", "False 5"]  # forgotten: prepared again
    detected = [line for line in lines if "pgbouncer_detected" in line]
    assert len(detected) == 1 and "--pgbouncer" in detected[0], lines


def test_far_instants_load_as_the_nearest_datetime_that_says_what_was_stored(dsn: str) -> None:
    """``tolerate_far_instants``: a value Python cannot hold loads (text and binary) as the end
    of Python's range that is nearest, printing as the server's text; others load unchanged."""
    statement = (
        "select '-infinity'::timestamptz, 'infinity'::timestamptz,"
        " '0001-12-31 10:00:00+00 BC'::timestamptz, '10000-01-01 11:59:00+00'::timestamptz,"
        " '2026-12-05 12:00:00+00'::timestamptz, 'infinity'::timestamp"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set timezone = 'UTC'")
        with pytest.raises(psycopg.DataError):
            conn.execute(statement).fetchone()  # psycopg's own loaders refuse them
        tolerate_far_instants(conn)
        for binary in (False, True):
            row = conn.cursor(binary=binary).execute(statement).fetchone()
            assert row is not None
            early, late, bc, y10k, plain, naive = row
            assert all(isinstance(v, FarInstant) for v in (early, late, bc, y10k, naive))
            assert (early.plain(), bc.plain()) == (datetime.min.replace(tzinfo=UTC),) * 2
            assert (late.plain(), y10k.plain()) == (datetime.max.replace(tzinfo=UTC),) * 2
            assert naive.tzinfo is None and naive.late
            assert (str(early), late.isoformat()) == ("-infinity", "infinity")
            assert not isinstance(plain, FarInstant)
            assert plain == datetime(2026, 12, 5, 12, tzinfo=UTC)
            assert sorted([late, plain, early]) == [early, plain, late]
            if not binary:
                assert str(y10k) == "10000-01-01 11:59:00+00"
