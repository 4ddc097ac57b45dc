"""AsyncResult as a Celery user sees it, with the tasks run by a real bridge worker on Postgres:
get/timeout/propagate, states and fields, forget, ignore_result, revoke before and during a run,
expiry, time limits, track_started, Reject, get() inside a task, and ``self.request``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from celery import chord, states, uuid
from celery.exceptions import (
    NotRegistered,
    Reject,
    TaskRevokedError,
    TimeLimitExceeded,
    TimeoutError,
)
from celery.result import AsyncResult
from kombu.exceptions import EncodeError

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    frozen_app_clock,
    jobs,
    worker,
)
from conftest import wait_for
from ujobs_bridge._internal.db import steering as steering_db


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app
    t.GATE.set()  # never leave a body blocked


def test_get_returns_the_value_and_the_result_reads_like_celery(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.add.delay(2, 3)
        assert r.get(timeout=10) == 5
    assert (r.state, r.status) == (states.SUCCESS, states.SUCCESS)
    assert r.ready() and r.successful() and not r.failed()
    assert (r.result, r.info, r.traceback) == (5, 5, None)
    assert isinstance(r.date_done, datetime)
    fresh = AsyncResult(r.id, app=app)  # another process asking later reads the same
    assert (fresh.state, fresh.result) == (states.SUCCESS, 5)
    assert [j["state"] for j in jobs(dsn, t.add.name)] == ["done"]


def test_get_times_out_while_the_task_runs_then_returns(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.blocks.delay()
        assert t.STARTED.wait(10)
        with pytest.raises(TimeoutError):
            r.get(timeout=0.2)
        assert r.state == states.PENDING and not r.ready()  # no track_started: PENDING as in Celery
        t.GATE.set()
        assert r.get(timeout=10) == "released"


def test_a_failure_raises_on_get_or_is_returned_with_propagate_false(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.fail.delay("bad input")
        with pytest.raises(ValueError, match="bad input"):
            r.get(timeout=10)
    exc = r.get(propagate=False)
    assert isinstance(exc, ValueError) and str(exc) == "bad input"
    assert (r.state, r.failed(), r.successful(), r.ready()) == (states.FAILURE, True, False, True)
    assert isinstance(r.result, ValueError) and r.info is r.result
    assert "ValueError: bad input" in r.traceback
    row = jobs(dsn, t.fail.name)[0]
    assert row["state"] == "dead" and "ValueError: bad input" in row["last_error"]
    assert t.RAN["fail"] == 1  # Celery does not retry a failure it was not told to retry


def test_a_result_over_the_workers_limit_fails_the_task_with_a_clear_error(
    app: Any, dsn: str
) -> None:
    with worker(app, dsn, max_result_bytes=20_000):
        small = t.identity.delay("x" * 1000)
        big = t.identity.delay("x" * 50_000)
        assert small.get(timeout=10) == "x" * 1000
        with pytest.raises(EncodeError, match="UJ_OUTPUT_TOO_LARGE") as raised:
            big.get(timeout=10)
    assert "20,000 bytes" in str(raised.value) and "--max-result-bytes" in str(raised.value)
    assert big.state == states.FAILURE
    [row] = [j for j in jobs(dsn, t.identity.name) if j["state"] == "dead"]
    assert "UJ_OUTPUT_TOO_LARGE" in row["last_error"]


def test_unknown_id_is_pending_and_forget_drops_a_result(app: Any, dsn: str) -> None:
    unknown = AsyncResult("no-such-task", app=app)
    assert (unknown.state, unknown.ready(), unknown.result) == (states.PENDING, False, None)
    with worker(app, dsn):
        r = t.add.delay(1, 1)
        assert r.get(timeout=10) == 2
    r.forget()
    assert AsyncResult(r.id, app=app).state == states.PENDING


def test_ignore_result_runs_the_task_and_stores_nothing(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r1 = t.fire_and_forget.delay(7)
        r2 = t.add.apply_async((1, 2), ignore_result=True)
        wait_for(
            lambda: {j["state"] for j in jobs(dsn)} == {"done"} and len(jobs(dsn)) == 2,
            what="both ran",
        )
    assert t.RAN["fire_and_forget"] == 1 and t.RAN["add"] == 1
    assert AsyncResult(r1.id, app=app).state == states.PENDING
    assert AsyncResult(r2.id, app=app).state == states.PENDING


def test_revoke_before_start_means_it_never_runs(app: Any, dsn: str, monkeypatch: Any) -> None:
    clock = frozen_app_clock(app, monkeypatch, datetime.now(UTC) + timedelta(minutes=1))
    with worker(app, dsn, clock=clock, start=False) as w:
        r = t.add.apply_async((1, 2), countdown=1)
        r.revoke()
        assert r.state == states.REVOKED
        clock.advance(timedelta(seconds=5))
        assert w.tick() == 0
        # Revokes are durable: an id revoked before its message is sent never runs either.
        later = AsyncResult(uuid(), app=app)
        later.revoke()
        t.add.apply_async((3, 4), task_id=later.id)
        assert w.tick() == 0
    assert t.RAN["add"] == 0 and later.state == states.REVOKED
    assert [j["state"] for j in jobs(dsn)] == ["cancelled", "cancelled"]
    with pytest.raises(TaskRevokedError):
        r.get(timeout=5)


def test_revoke_terminate_interrupts_a_running_body(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.blocks.delay()
        assert t.STARTED.wait(10)
        r.revoke(terminate=True)
        with pytest.raises(TaskRevokedError):
            r.get(timeout=10)
        wait_for(lambda: jobs(dsn)[0]["state"] == "cancelled", what="the row cancelled")
    assert r.state == states.REVOKED
    assert t.RAN["blocks"] == 1 and t.RAN["blocks_finished"] == 0


def test_an_operator_cancel_of_a_running_task_interrupts_it(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.blocks.delay()
        assert t.STARTED.wait(10)
        with psycopg.connect(dsn, autocommit=True) as conn:  # what `ujobs-bridge jobs cancel` does
            assert steering_db.job_cancel(conn, jobs(dsn)[0]["id"], "cancelled by an operator")
        with pytest.raises(TaskRevokedError):
            r.get(timeout=10)
    assert t.RAN["blocks"] == 1 and t.RAN["blocks_finished"] == 0


def test_expired_before_it_runs_is_revoked_and_never_runs(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.add.apply_async((1, 2), expires=datetime.now(UTC) - timedelta(seconds=10))
        with pytest.raises(TaskRevokedError):
            r.get(timeout=10)
    assert r.state == states.REVOKED
    assert t.RAN["add"] == 0
    assert jobs(dsn)[0]["state"] == "cancelled"


def test_soft_time_limit_raises_inside_the_task(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        assert t.soft_limited.delay().get(timeout=10) == "soft limit caught"


def test_hard_time_limit_fails_the_task(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.hard_limited.delay()
        with pytest.raises(TimeLimitExceeded):
            r.get(timeout=10)
    assert r.state == states.FAILURE
    assert t.RAN["hard_limited"] == 1 and t.RAN["hard_limited_finished"] == 0


def test_track_started_shows_started_while_running(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.tracked.delay()
        assert t.STARTED.wait(10)
        wait_for(lambda: r.state == states.STARTED, what="STARTED")
        assert "hostname" in r.info and "pid" in r.info
        t.GATE.set()
        assert r.get(timeout=10) == "tracked"


def test_reject_without_requeue_drops_the_message_and_reads_failure(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.rejects.delay(False)
        with pytest.raises(Reject):  # Celery 5.7 stores FAILURE(Reject) instead of PENDING forever
            r.get(timeout=10)
        wait_for(lambda: jobs(dsn)[0]["state"] == "dead", what="the message dropped")
    assert t.RAN["rejects"] == 1 and r.state == states.FAILURE


def test_reject_with_requeue_delivers_the_message_again(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.rejects.delay(True)
        assert r.get(timeout=10) is None
    assert t.RAN["rejects"] == 2
    assert r.state == states.SUCCESS


def test_get_inside_a_task_is_refused_like_celery(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.waits_on_child.delay()
        exc = r.get(timeout=10, propagate=False)
    assert isinstance(exc, RuntimeError) and "Never call result.get() within a task" in str(exc)
    assert t.add.delay(1, 1).id  # the test thread itself may still send and wait


def test_allow_join_result_lets_a_task_wait_like_celery(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        assert t.waits_allowed.delay().get(timeout=10) == 2


def test_update_state_is_visible_while_the_task_runs(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = t.progress.delay()
        assert t.STARTED.wait(10)
        assert (r.state, r.info) == ("PROGRESS", {"done": 1, "total": 2})
        t.GATE.set()
        assert r.get(timeout=10) == "finished"


def test_a_retry_sent_after_its_id_was_revoked_never_runs_and_reads_revoked(
    app: Any, dsn: str
) -> None:
    with worker(app, dsn):
        r = t.retry_after_gate.delay()
        assert t.STARTED.wait(10)
        r.revoke()  # no terminate: the running body goes on, as in Celery
        t.GATE.set()
        wait_for(
            lambda: len(jobs(dsn)) == 2 and jobs(dsn)[0]["state"] == "done", what="the retry sent"
        )
    assert [j["state"] for j in jobs(dsn)] == ["done", "cancelled"]
    assert r.state == states.REVOKED and t.RAN["retry_after_gate"] == 1
    with pytest.raises(TaskRevokedError):
        r.get(timeout=5)


def listen_connections(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_stat_activity"
            " where datname = current_database() and query ilike 'listen x_celery_results%%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_one_backend_and_one_listen_connection_per_app(app: Any, dsn: str) -> None:
    with worker(app, dsn, concurrency=8):
        assert t.add.delay(1, 2).get(timeout=10) == 3  # the app's listener is up
        before = listen_connections(dsn)
        for _ in range(4):  # chord joins run in the worker's body threads
            assert chord(t.add.s(i, i) for i in range(8))(t.tsum.s()).get(timeout=10) == 56
        # not one more per worker thread (Celery's per-thread backend default)
        assert listen_connections(dsn) == before


def test_result_extended_stores_name_args_kwargs_queue_and_worker(app: Any, dsn: str) -> None:
    app.conf.result_extended = True
    try:
        with worker(app, dsn):
            r = t.add.apply_async((2, 3), queue="celery")
            assert r.get(timeout=10) == 5
    finally:
        app.conf.result_extended = False
    fresh = AsyncResult(r.id, app=app)  # read back from Postgres, as another process would
    assert (fresh.name, fresh.args, fresh.kwargs) == (t.add.name, [2, 3], {})
    assert (fresh.queue, fresh.retries) == ("celery", 0)
    assert fresh.worker and isinstance(fresh.date_done, datetime)
    plain = t.add.apply_async((1, 1), queue="celery")
    with worker(app, dsn):
        assert plain.get(timeout=10) == 2
    assert AsyncResult(plain.id, app=app).name is None  # not extended: as in Celery


def test_a_late_retry_write_never_replaces_a_stored_success(app: Any, dsn: str) -> None:
    """Two runs of one task id (a replayed message whose re-send already ran): the replay read
    RETRY, then the re-send stored SUCCESS, then the replay writes RETRY. Celery's guard is a
    read then a write; the stored SUCCESS must stay, or get() waits forever."""
    tid = uuid()
    app.backend.store_result(tid, None, states.RETRY)  # the first run's retry
    key = app.backend.get_key_for_task(tid).decode()
    success = json.dumps(
        {
            "status": "SUCCESS",
            "result": 42,
            "traceback": None,
            "children": [],
            "date_done": None,
            "task_id": tid,
        }
    )
    with psycopg.connect(dsn) as other:  # the re-send's worker, mid-commit of its SUCCESS
        other.execute(
            "update x_celery_results set value = %s, status = 'SUCCESS' where key = %s",
            (success, key),
        )
        late = threading.Thread(
            target=app.backend.store_result, args=(tid, None, states.RETRY), daemon=True
        )
        late.start()  # reads RETRY (the other write is uncommitted), then waits on the row

        def waiting_on_the_row() -> bool:
            with psycopg.connect(dsn, autocommit=True) as probe:
                row = probe.execute(
                    "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
                    " and datname = current_database() and query like %s",
                    ("%x_celery_results%",),
                ).fetchone()
            return bool(row and row[0])

        wait_for(waiting_on_the_row, timeout=30, what="the late RETRY write to wait")
        other.commit()
    late.join(timeout=30)
    assert not late.is_alive()
    stored = AsyncResult(tid, app=app)
    assert (stored.state, stored.get(timeout=5)) == (states.SUCCESS, 42)


def test_an_unknown_task_name_fails_not_registered_once_no_live_worker_has_it(
    app: Any, dsn: str
) -> None:
    """As a Celery worker records an unknown task: FAILURE ``NotRegistered``. While a live worker
    consuming the queue has the task registered (its presence row says so), the message waits
    for it instead."""
    name = "apps.celery_tasks.not_here"
    with worker(app, dsn, start=False) as w, psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "insert into x_worker_nodes (worker_id, name, hostname, pid, queues, concurrency,"
            " pool, info, started_at, heartbeat_at, expires_at) values (gen_random_uuid(),"
            " 'newer@host', 'host', 1, array['celery'], 1, 'threads', %s::jsonb, now(), now(),"
            " now() + interval '1 hour')",
            (json.dumps({"registered": [name]}),),
        )
        r = app.send_task(name)
        w.claims.sweep(force=True)
        assert r.state == states.PENDING  # the newer worker has it: it waits for that one
        conn.execute("delete from x_worker_nodes where name = 'newer@host'")
        w.claims.sweep(force=True)
        with pytest.raises(NotRegistered, match="not_here"):
            r.get(timeout=10)
        assert r.state == states.FAILURE
    assert [j["state"] for j in jobs(dsn, name)] == ["dead"]
