"""The rest of the engine's ``db`` surface, function by function, against real Postgres: the job
writes and reads ``jobs`` shows, the step and event statements, the schema runner and the
connection policy. ``test_driver_contract.py`` holds the claim/lease/fencing half.

Each test names the promise a caller relies on; together with that file every public function of
``ujobs_bridge.db`` is exercised here (``test_every_db_function_has_a_contract_test``).
"""

from __future__ import annotations

import ast
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ujobs_bridge.db import connections, schema
from ujobs_bridge.db import jobs as driver
from ujobs_bridge.db import steps as steps_db
from ujobs_bridge.db import testing as testing_db
from ujobs_bridge.db.steps import Lease
from ujobs_bridge.errors import SchemaError
from ujobs_bridge.records import JobState, Settlement

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
NAME = "contract.job"


def spec(**over: Any) -> driver.EnqueueSpec:
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "name": NAME,
        "queue": "contract",
        "input_json": json.dumps({"args": [1], "kwargs": {}}),
        "max_attempts": 2,
    }
    values.update(over)
    return driver.EnqueueSpec(**values)


def claim_one(db: psycopg.Connection[Any]) -> Any:
    (got,) = driver.job_claim(
        db,
        driver.ClaimParams(
            queue="contract", names=[NAME], limit=1, token=uuid.uuid4(), lease_s=30, worker="t"
        ),
    )
    return got


def test_enqueue_inserts_once_and_a_live_key_answers_with_its_holder(db: Any) -> None:
    first = driver.job_enqueue(db, spec(idempotency_key="k1"), None)
    again = driver.job_enqueue(db, spec(idempotency_key="k1"), None)
    assert not first.existing and again.existing and again.id == first.id
    many = driver.job_enqueue_many(
        db, [spec(), spec(idempotency_key="k1"), spec(delay_s=60.0)], None
    )
    assert [r.existing for r in many] == [False, True, False] and many[1].id == first.id
    record = driver.job_get(db, many[2].id)
    assert record is not None and record.state is JobState.READY
    assert record.run_at - record.created_at >= timedelta(seconds=59)


def test_settle_then_claim_writes_outcomes_and_claims_in_one_transaction(db: Any) -> None:
    a, b = driver.job_enqueue_many(db, [spec(), spec()], None)
    running = claim_one(db)
    done = Settlement(running.id, running.lease_token, state=JobState.DONE, output_json="7")
    matched, claimed = driver.job_settle_then_claim(
        db,
        [done],
        driver.ClaimParams(
            queue="contract", names=[NAME], limit=5, token=uuid.uuid4(), lease_s=30, worker="t"
        ),
        durable=True,
    )
    assert matched == {running.id} and [c.id for c in claimed] == [
        ({a.id, b.id} - {running.id}).pop()
    ]
    states = driver.job_states(db, [a.id, b.id])
    assert {s for s, _ in states.values()} == {JobState.DONE, JobState.RUNNING}
    assert states[claimed[0].id][1] == claimed[0].lease_token


def test_expire_cancels_only_jobs_past_their_expiry_that_never_ran(db: Any) -> None:
    now = datetime.now(UTC)
    stale = driver.job_enqueue(
        db, spec(expires_at=now - timedelta(seconds=1), run_at=now - timedelta(seconds=5)), None
    )
    fresh = driver.job_enqueue(db, spec(expires_at=now + timedelta(hours=1)), None)
    assert driver.job_expire(db, limit=10, error="UJ_JOB_EXPIRED: late", now=None) == [stale.id]
    gone, kept = driver.job_get(db, stale.id), driver.job_get(db, fresh.id)
    assert gone is not None and gone.state is JobState.CANCELLED and gone.finished_at is not None
    assert kept is not None and kept.state is JobState.READY


def test_cancel_then_requeue_gives_fresh_attempts_and_reads_show_it(db: Any) -> None:
    ref = driver.job_enqueue(db, spec(), None)
    assert driver.job_cancel(db, ref.id, "UJ_JOB_CANCELLED: by hand")
    assert not driver.job_cancel(db, ref.id, "again")  # only a live job can be cancelled
    assert driver.job_requeue(db, ref.id, None)
    record = driver.job_get(db, ref.id)
    assert record is not None and (record.state, record.attempt) == (JobState.READY, 0)
    assert [
        r.id for r in driver.job_list(db, state="ready", queue="contract", name=NAME, limit=5)
    ] == [ref.id]
    assert driver.job_list(db, state="dead", queue=None, name=None, limit=5) == []


def test_dead_letters_and_stats_per_queue_and_state(db: Any) -> None:
    driver.job_enqueue_many(db, [spec(), spec(), spec(queue="other")], None)
    running = claim_one(db)
    dead = Settlement(running.id, running.lease_token, state=JobState.DEAD, error="boom")
    assert driver.job_settle(db, [dead], None) == {running.id}
    assert [r.id for r in driver.job_dead(db, limit=5)] == [running.id]
    stats = {(s.queue, s.state): s.jobs for s in driver.job_stats(db)}
    assert stats == {
        ("contract", JobState.READY): 1,
        ("contract", JobState.DEAD): 1,
        ("other", JobState.READY): 1,
    }


def test_step_writes_are_fenced_by_the_lease_and_listed_in_order(db: Any) -> None:
    driver.job_enqueue(db, spec(), None)
    job = claim_one(db)
    lease = Lease(job.id, job.lease_token, job.attempt)
    stranger = Lease(job.id, uuid.uuid4(), job.attempt)
    started = datetime.now(UTC)
    assert steps_db.lease_held(db, lease) and not steps_db.lease_held(db, stranger)
    assert not steps_db.step_complete(db, stranger, "a", 0, "1", started)  # fenced: nothing written
    assert steps_db.step_complete(db, lease, "a", 0, "1", started)
    assert not steps_db.step_complete(db, lease, "a", 0, "2", started)  # already completed: kept
    assert steps_db.step_fail(db, lease, "b", 1, "went wrong", started)
    listed = steps_db.step_list(db, job.id)
    assert [(s.name, s.status) for s in listed] == [("a", "completed"), ("b", "failed")]
    assert listed[0].output == 1


def test_a_sleeping_step_wakes_only_once_due(db: Any) -> None:
    driver.job_enqueue(db, spec(), None)
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
    driver.job_enqueue(db, spec(), None)
    job = claim_one(db)
    lease = Lease(job.id, job.lease_token, job.attempt)
    stored, woken = steps_db.event_send(db, "paid", "order-1", json.dumps({"cents": 5}), None)
    assert (stored, woken) == (1, 0)
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
    assert [m.version for m in shipped] == list(range(1, len(shipped) + 1))
    assert schema.pending(dsn) == [] and schema.upgrade(dsn) == []  # already current: no-op
    schema.require_current(dsn)
    with connections.connect(dsn, connections.Role("test")) as conn:
        assert [a.version for a in schema.applied(conn)] == [m.version for m in shipped]


def test_an_empty_database_is_refused_until_upgraded(pg_dsn: str) -> None:
    from conftest import ADMIN_DSN, _dsn_for

    name = f"ujb_contract_{uuid.uuid4().hex[:8]}"
    with connections.connect(ADMIN_DSN, connections.Role("test")) as admin:
        testing_db.database_create(admin, name)
    dsn = _dsn_for(name)
    try:
        with pytest.raises(SchemaError):
            schema.require_current(dsn)
        assert len(schema.pending(dsn)) == len(schema.available())
        assert [m.version for m in schema.upgrade(dsn)] == [m.version for m in schema.available()]
        schema.require_current(dsn)
    finally:
        with connections.connect(ADMIN_DSN, connections.Role("test")) as admin:
            testing_db.database_drop(admin, name)


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


def test_enqueue_on_an_async_connection_joins_its_transaction(dsn: str, db: Any) -> None:
    import asyncio

    async def run() -> tuple[Any, Any]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            kept = await driver.job_enqueue_async(conn, spec(idempotency_key="async"), None)
            await conn.commit()
            await driver.job_enqueue_async(conn, spec(), None)
            await conn.rollback()  # the caller's transaction decides
            again = await driver.job_enqueue_async(conn, spec(idempotency_key="async"), None)
            await conn.commit()
            return kept, again

    kept, again = asyncio.run(run())
    assert again.existing and again.id == kept.id
    assert db.execute("select count(*) from x_jobs").fetchone() == (1,)


def test_the_test_kits_statements_claim_by_id_count_due_jobs_and_empty_the_tables(db: Any) -> None:
    later = driver.job_enqueue(db, spec(delay_s=3600.0), None)
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
    driver.job_enqueue_many(
        db,
        [spec(name="gone.task", run_at=old), spec(name="gone.task", run_at=old), spec(run_at=old)],
        None,
    )
    driver.job_enqueue(db, spec(name="gone.task", queue="elsewhere", run_at=old), None)
    find = driver.UnregisteredParams(
        queues=["contract"], names=[NAME], after_s=60, scan=1000, now=now
    )
    (backlog,) = driver.job_unregistered(db, find)
    assert (backlog.queue, backlog.name, backlog.jobs) == ("contract", "gone.task", 2)
    assert backlog.oldest_s >= 299
    assert (
        driver.job_unregistered(db, driver.UnregisteredParams(["contract"], [NAME], 600, 1000, now))
        == []
    )
    stranded = {(s.queue, s.name): s.jobs for s in driver.job_stranded(db, after_s=60, now=now)}
    assert stranded == {
        ("contract", "gone.task"): 2,
        ("contract", NAME): 1,
        ("elsewhere", "gone.task"): 1,
    }
    dead = driver.DeadUnregisteredParams(
        queue="contract",
        names=[NAME],
        after_s=60,
        limit=10,
        error="UJ_TASK_UNREGISTERED: {name}",
        now=now,
    )
    assert sorted(name for _, name in driver.job_dead_unregistered(db, dead)) == [
        "gone.task",
        "gone.task",
    ]
    assert [r.last_error for r in driver.job_dead(db, limit=5)] == [
        "UJ_TASK_UNREGISTERED: gone.task"
    ] * 2


def test_every_db_function_has_a_contract_test() -> None:
    """A new public function in ``ujobs_bridge/db`` without a test here or in the sibling files
    fails: the db surface is the seam every other layer trusts."""
    contract = "\n".join(
        (TESTS / name).read_text()
        for name in ("test_db_contract.py", "test_driver_contract.py", "test_testing_kit.py")
    )
    missing = []
    for path in sorted((ROOT / "ujobs_bridge" / "db").glob("*.py")):
        if path.name == "sql.py":  # the statement loader: tests/test_guards.py tests it
            continue
        for node in ast.parse(path.read_text()).body:
            public = isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef
            ) and not node.name.startswith("_")
            if public and f"{node.name}(" not in contract:
                missing.append(f"{path.name}:{node.name}")
    assert not missing, f"db functions with no contract test: {missing}"
