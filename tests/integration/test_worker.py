"""The worker in-process, driven by ``tick()`` with a frozen clock: outcomes a user sees in the
job rows (done, retried with backoff, dead-lettered, expired, cancelled, timed out)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from apps import basic_jobs
from conftest import wait_for
from ujobs_bridge import FrozenClock, SystemClock, Worker, WorkerConfig
from ujobs_bridge._internal.config.loading import from_module
from ujobs_bridge._internal.db import nodes, session
from ujobs_bridge._internal.observe.introspect import Introspector
from ujobs_bridge._internal.worker import claims
from ujobs_bridge.client import Client


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    basic_jobs.CALLS.clear()
    basic_jobs.FAILURES_LEFT.clear()
    basic_jobs.STARTED.clear()


@pytest.fixture
def make_worker(dsn: str, clock: FrozenClock) -> Iterator[Any]:
    made: list[Worker] = []

    def make(**config: Any) -> Worker:
        frozen = config.pop("frozen", True)
        worker = Worker(
            dsn,
            from_module(basic_jobs),
            WorkerConfig(**{"queues": ("basic",), **config}),
            clock=clock if frozen else SystemClock(),
        )
        made.append(worker)
        return worker

    yield make
    for w in made:
        w.stop(timeout_s=2)


def row(db: psycopg.Connection[Any], job_id: Any) -> dict[str, Any]:
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    found = cur.execute(
        "select state, attempt, output, last_error, run_at, lease_token from x_jobs where id = %s",
        (job_id,),
    ).fetchone()
    assert found is not None
    return found


def test_a_job_runs_once_and_stores_its_result(
    frozen_client: Client, make_worker: Any, db: Any
) -> None:
    ref = basic_jobs.add.configure(client=frozen_client).enqueue(2, 3)
    assert make_worker().tick() == 1
    r = row(db, ref.id)
    assert (r["state"], r["attempt"], r["output"], r["lease_token"]) == ("done", 1, 5, None)
    assert basic_jobs.CALLS["add"] == 1


def test_a_failure_is_retried_after_its_backoff_then_succeeds(
    frozen_client: Client, clock: FrozenClock, make_worker: Any, db: Any
) -> None:
    basic_jobs.FAILURES_LEFT["a"] = 2
    ref = basic_jobs.flaky.configure(client=frozen_client).enqueue("a")
    worker = make_worker()
    assert worker.tick() == 1
    r = row(db, ref.id)
    assert (r["state"], r["attempt"]) == ("ready", 1)
    assert r["run_at"] == clock.now() + timedelta(seconds=10)  # backoff 10 s, no jitter
    assert "Transient: transient failure of a" in r["last_error"]
    assert worker.tick() == 0  # not due yet: the clock has not moved
    clock.advance(timedelta(seconds=10))
    assert worker.tick() == 1
    r = row(db, ref.id)
    assert (r["state"], r["attempt"], r["run_at"]) == (
        "ready",
        2,
        clock.now() + timedelta(seconds=20),
    )  # exponential
    clock.advance(timedelta(seconds=20))
    assert worker.tick() == 1
    r = row(db, ref.id)
    assert (r["state"], r["attempt"], r["output"]) == ("done", 3, "a")
    assert basic_jobs.CALLS["flaky:a"] == 3


def test_a_job_that_keeps_failing_is_dead_lettered_after_max_attempts(
    frozen_client: Client, make_worker: Any, db: Any
) -> None:
    ref = basic_jobs.always_fails.configure(client=frozen_client).enqueue()
    worker = make_worker()
    worker.tick()
    worker.tick()
    assert worker.tick() == 0
    r = row(db, ref.id)
    assert (r["state"], r["attempt"]) == ("dead", 2)
    assert "this job never works" in r["last_error"]
    assert basic_jobs.CALLS["always_fails"] == 2
    dead = Introspector(db.info.dsn).dead()
    assert [d.id for d in dead] == [ref.id]


def test_only_listed_exceptions_are_retried(
    frozen_client: Client, clock: FrozenClock, make_worker: Any, db: Any
) -> None:
    permanent = basic_jobs.picky.configure(client=frozen_client).enqueue("permanent")
    transient = basic_jobs.picky.configure(client=frozen_client).enqueue("transient")
    make_worker().tick()
    assert row(db, permanent.id)["state"] == "dead"
    assert row(db, transient.id)["state"] == "ready"


def test_backoff_is_capped_and_jittered() -> None:
    from ujobs_bridge import RetryPolicy

    policy = RetryPolicy(max_attempts=20, backoff_base_s=1, backoff_cap_s=60, random=lambda: 0.5)
    delays = [policy.delay_s(a) for a in range(1, 12)]
    assert delays[:3] == [0.75, 1.5, 3.0]  # half fixed + half * 0.5
    assert max(delays) == 45.0  # cap 60, jittered
    low = RetryPolicy(backoff_base_s=8, random=lambda: 0.0).delay_s(1)
    high = RetryPolicy(backoff_base_s=8, random=lambda: 0.999).delay_s(1)
    assert low == 4 and 7.9 < high < 8


def test_an_expired_job_is_skipped_not_run(
    frozen_client: Client, clock: FrozenClock, make_worker: Any, db: Any
) -> None:
    ref = basic_jobs.add.configure(client=frozen_client, expires=30).enqueue(1, 1)
    clock.advance(timedelta(seconds=31))
    make_worker().tick()
    r = row(db, ref.id)
    assert r["state"] == "cancelled" and "UJ_JOB_EXPIRED" in r["last_error"]
    assert basic_jobs.CALLS["add"] == 0


def test_jobs_of_other_queues_are_left_alone(
    frozen_client: Client, make_worker: Any, db: Any
) -> None:
    ref = basic_jobs.other_queue.configure(client=frozen_client).enqueue()
    make_worker().tick()
    assert row(db, ref.id)["state"] == "ready"
    make_worker(queues=("other",)).tick()
    assert row(db, ref.id)["state"] == "done"


def test_async_jobs_run_on_the_event_loop(frozen_client: Client, make_worker: Any, db: Any) -> None:
    ref = basic_jobs.async_double.configure(client=frozen_client).enqueue(21)
    make_worker().tick()
    assert row(db, ref.id)["output"] == 42


def test_a_result_that_is_not_json_dead_letters_with_the_job_name(
    frozen_client: Client, make_worker: Any, db: Any
) -> None:
    ref = basic_jobs.returns_object.configure(client=frozen_client).enqueue()
    make_worker().tick()
    r = row(db, ref.id)
    assert r["state"] == "dead" and "apps.basic_jobs.returns_object" in r["last_error"]


def test_a_per_attempt_timeout_stops_the_body_and_fails_the_attempt(
    client: Client, make_worker: Any, db: Any
) -> None:
    ref = basic_jobs.too_slow.configure(client=client).enqueue()
    worker = make_worker(frozen=False, poll_s=0.05)
    worker.start()
    wait_for(
        lambda: row(db, ref.id)["state"] == "dead", timeout=15, what="the job to time out twice"
    )
    r = row(db, ref.id)
    assert r["attempt"] == 2 and "UJ_JOB_TIMEOUT" in r["last_error"]


def test_cancelling_a_running_job_reaches_its_body(
    client: Client, make_worker: Any, db: Any
) -> None:
    ref = basic_jobs.waits_for_cancel.configure(client=client).enqueue()
    worker = make_worker(frozen=False)
    worker.start()
    assert basic_jobs.STARTED.wait(10)
    Introspector(db.info.dsn).cancel(ref.id)
    wait_for(lambda: worker.in_flight() == 0, timeout=5, what="the body to stop")
    r = row(db, ref.id)
    assert r["state"] == "cancelled" and r["output"] is None
    assert basic_jobs.CALLS["waits_for_cancel"] == 1


def marked(db: psycopg.Connection[Any], worker: Worker) -> list[str]:
    """The queues ``worker`` marked as waited for (migration 0021: inserts into them notify)."""
    return sorted(q for q, worker_id, _since in nodes.queue_waiters(db) if worker_id == worker.id)


def idle(db: psycopg.Connection[Any], worker: Worker, *queues: str) -> None:
    wait_for(lambda: marked(db, worker) == sorted(queues), timeout=10, what=f"waiting on {queues}")


def armed(db: psycopg.Connection[Any], worker: Worker) -> list[str]:
    """The queues whose marks of ``worker`` are armed for a hand-off (migration 0027)."""
    rows = db.execute(
        "select queue from x_queue_waiters where worker_id = %s and armed order by queue",
        (worker.id,),
    ).fetchall()
    return [r[0] for r in rows]


def ready_for_hand_off(db: psycopg.Connection[Any], worker: Worker, *queues: str) -> None:
    """``worker`` is armed for a hand-off on ``queues`` and at rest: the one claim it takes after
    marking (a job committed just before the mark sent no notification) is behind it."""
    idle(db, worker, *queues)
    wait_for(lambda: armed(db, worker) == sorted(queues), timeout=10, what=f"armed on {queues}")
    wait_for(worker.claim_loop.resting.is_set, timeout=10, what="the worker at rest")


def handed_ids(notes: Any) -> list[str]:
    """The job ids of hand-off notifications (a JSON header, a newline, the input)."""
    return [json.loads(n.payload.partition("\n")[0])["id"] for n in notes]


def test_an_idle_worker_is_woken_by_notify_not_by_polling(
    client: Client, make_worker: Any, db: Any
) -> None:
    worker = make_worker(frozen=False, poll_s=60)
    worker.start()
    assert worker.listener.listening.wait(10)
    idle(db, worker, "basic")  # an insert into its queue now notifies
    ref = basic_jobs.add.configure(client=client).enqueue(1, 2)
    wait_for(
        lambda: row(db, ref.id)["state"] == "done",
        timeout=10,
        what="the notified worker to run the job",
    )


def test_a_busy_worker_is_not_notified_and_waits_again_once_its_slots_free(
    client: Client, make_worker: Any, db: Any, dsn: str
) -> None:
    """While its claims fill every free slot, a worker's queues carry no mark and an insert
    sends no notification (producers then share their commits' flushes, 0021); once its claim
    comes back short again it marks them, and an insert hands it the job at once (0027)."""
    worker = make_worker(frozen=False, poll_s=60, concurrency=1, prefetch_multiplier=1)
    worker.start()
    assert worker.listener.listening.wait(10)
    idle(db, worker, "basic")
    basic_jobs.STARTED.clear()
    blocker = basic_jobs.waits_for_cancel.configure(client=client).enqueue()
    assert basic_jobs.STARTED.wait(10)
    idle(db, worker)  # its one slot is taken: the mark is gone
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("listen x_jobs_ready")
        session.listen_for_wake(listener, worker.wake_channel)
        queued = basic_jobs.add.configure(client=client).enqueue(1, 2)
        assert [n.payload for n in listener.notifies(timeout=0.5)] == []
        Introspector(dsn).cancel(blocker.id)
        wait_for(lambda: row(db, queued.id)["state"] == "done", timeout=10, what="the queued job")
        ready_for_hand_off(db, worker, "basic")
        session.listen_for_wake(listener, worker.hand_channel)
        later = basic_jobs.add.configure(client=client).enqueue(3, 4)
        handed = listener.notifies(timeout=10, stop_after=1)
        assert [n.channel for n in handed] == [worker.hand_channel]  # handed, not woken
    wait_for(lambda: row(db, later.id)["state"] == "done", timeout=10, what="the handed job")


def test_marks_reaped_with_the_node_come_back_once_the_node_does(
    client: Client, make_worker: Any, db: Any, dsn: str
) -> None:
    """A worker whose node was reaped (an outage longer than its lease) lost its marks with it,
    and its poll picks jobs up; once its presence registers the node again, the poll's re-check
    marks the queue again and inserts wake it. (No check that nothing notifies meanwhile: the
    heartbeat may bring the node back at any moment.) Marked again, it is handed the next job."""
    worker = make_worker(frozen=False, poll_s=0.2, lease_s=3.0)
    worker.start()
    assert worker.listener.listening.wait(10)
    idle(db, worker, "basic")
    deleted = db.execute(
        "delete from x_worker_nodes where worker_id = %s returning worker_id", (worker.id,)
    ).fetchall()  # reaped: its marks go with it (the contract test checks the cascade)
    assert deleted == [(worker.id,)]
    with psycopg.connect(dsn, autocommit=True) as listener:
        session.listen_for_wake(listener, worker.wake_channel)
        polled = basic_jobs.add.configure(client=client).enqueue(1, 1)
        wait_for(lambda: row(db, polled.id)["state"] == "done", timeout=10, what="a polled claim")
        ready_for_hand_off(db, worker, "basic")  # the node is back (its heartbeat, every second)
        session.listen_for_wake(listener, worker.hand_channel)
        again = basic_jobs.add.configure(client=client).enqueue(2, 2)
        notes = listener.notifies(timeout=10, stop_after=1)
        assert handed_ids(notes) == [str(again.id)]


def test_one_insert_is_handed_to_exactly_one_of_several_idle_workers(
    client: Client, make_worker: Any, db: Any, dsn: str
) -> None:
    """0027: into an idle fleet, the insert itself claims the job for one armed worker and sends
    it on that worker's hand-off channel: no wake-up on any channel, no claim pass by any worker
    (the body's start and its outcome claim nothing either); the job runs once, attempt 1, and
    the worker arms its mark again for the next one."""
    fleet = [make_worker(frozen=False, poll_s=60) for _ in range(4)]
    for worker in fleet:
        worker.start()
    for worker in fleet:
        assert worker.listener.listening.wait(10)
        ready_for_hand_off(db, worker, "basic")
    by_hand = {w.hand_channel: w for w in fleet}
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("listen x_jobs_ready")
        for w in fleet:
            session.listen_for_wake(listener, w.wake_channel)
            session.listen_for_wake(listener, w.hand_channel)
        for rnd in range(3):
            before = [(w.counts.claims, w.counts.hand_offs) for w in fleet]
            ref = basic_jobs.add.configure(client=client).enqueue(rnd, 1)
            wait_for(lambda r=ref: row(db, r.id)["state"] == "done", timeout=10, what="the job")
            notes = list(listener.notifies(timeout=0.5))
            assert [n.channel in by_hand for n in notes] == [True], notes  # one hand-off only
            ran = by_hand[notes[0].channel]
            assert handed_ids(notes) == [str(ref.id)]
            assert row(db, ref.id)["attempt"] == 1
            ready_for_hand_off(db, ran, "basic")  # armed again for the next job
            after = [(w.counts.claims, w.counts.hand_offs) for w in fleet]
            changes = [(c1 - c0, h1 - h0) for (c0, h0), (c1, h1) in zip(before, after, strict=True)]
            assert changes == [(0, 1) if w is ran else (0, 0) for w in fleet]


def test_a_waiting_worker_whose_claim_connection_was_killed_is_still_woken(
    client: Client, make_worker: Any, db: Any
) -> None:
    """The marks are rows, not session state: a claim connection killed while the worker waits
    leaves them in place; the insert hands the worker its job, the worker re-arms on a fresh
    connection, and the next job is handed to it too."""
    worker = make_worker(frozen=False, poll_s=60)
    worker.start()
    assert worker.listener.listening.wait(10)
    idle(db, worker, "basic")
    with worker.claims.shared.using() as conn:
        pid = conn.info.backend_pid
    db.execute("select pg_terminate_backend(%s)", (pid,))
    ref = basic_jobs.add.configure(client=client).enqueue(7, 8)
    wait_for(lambda: row(db, ref.id)["state"] == "done", timeout=10, what="the notified claim")
    ready_for_hand_off(db, worker, "basic")  # armed again, on a fresh claim connection
    again = basic_jobs.add.configure(client=client).enqueue(1, 8)
    wait_for(lambda: row(db, again.id)["state"] == "done", timeout=10, what="the next job")
    assert worker.counts.hand_offs == 2


def test_a_job_committed_just_before_the_mark_is_claimed_without_waiting_for_the_poll(
    client: Client, make_worker: Any, db: Any
) -> None:
    """A job whose insert committed after the worker's last claim but before its mark sent no
    notification: the worker claims once more after marking, before it waits (poll 60 s). Here
    the mark was lost (a failover, a reap) and the poll's re-check marks again."""
    worker = make_worker(frozen=False, poll_s=60)
    worker.start()
    assert worker.listener.listening.wait(10)
    idle(db, worker, "basic")
    nodes.queue_waiting_unmark(db, worker.id)  # lost: inserts no longer wake the worker
    mark = worker.claims.mark_waiting
    sent: list[Any] = []

    def insert_then_mark() -> tuple[bool, int]:
        if not sent:  # between the worker's empty claim and its mark: no mark, no notification
            sent.append(basic_jobs.add.configure(client=client).enqueue(5, 6))
        return mark()

    worker.claims.mark_waiting = insert_then_mark  # type: ignore[method-assign]
    worker.claim_loop.unsure = True  # what its poll sets: assert the mark again ...
    worker._wake.set()  # ... when the poll wakes it
    wait_for(lambda: bool(sent), timeout=10, what="the worker's mark")
    wait_for(lambda: row(db, sent[0].id)["state"] == "done", timeout=10, what="the re-claim")
    assert marked(db, worker) == ["basic"]


def test_stop_is_idempotent_and_safe_before_start(make_worker: Any) -> None:
    worker = make_worker()
    worker.stop(timeout_s=0)
    worker.stop(timeout_s=0)


def test_the_process_pool_runs_jobs_by_name_from_the_app_module(
    dsn: str, client: Client, db: Any
) -> None:
    from ujobs_bridge._internal.config import loading

    ref = basic_jobs.add.configure(client=client).enqueue(20, 22)
    where = basic_jobs.whereami.configure(client=client).enqueue()
    worker = Worker(
        dsn,
        loading.load("apps.basic_jobs"),
        WorkerConfig(queues=("basic",), pool="processes", concurrency=1),
        app_spec="apps.basic_jobs",
    )
    try:
        assert worker.tick() == 2
    finally:
        worker.stop(timeout_s=2)
    assert row(db, ref.id)["output"] == 42
    # current_job() works in the child as in a thread body
    seen = row(db, where.id)["output"]
    assert seen["pid"] != os.getpid()
    assert (seen["queue"], seen["attempt"], seen["id"]) == ("basic", 1, str(where.id))


def test_two_jobs_under_one_name_are_refused() -> None:
    from ujobs_bridge import ConfigError, job
    from ujobs_bridge._internal.config.loading import build

    a = job(name="same.name")(lambda: None)
    b = job(name="same.name")(lambda: None)
    with pytest.raises(ConfigError, match="two jobs are named"):
        build([a, b])


def test_reload_runs_jobs_and_queues_added_after_start(dsn: str, client: Client, db: Any) -> None:
    jobs = from_module(basic_jobs)
    worker = Worker(
        dsn, {"apps.basic_jobs.add": jobs["apps.basic_jobs.add"]}, WorkerConfig(poll_s=60)
    )  # queues: only "basic"
    try:
        worker.start()
        assert worker.listener.listening.wait(10)
        ref = basic_jobs.other_queue.configure(client=client).enqueue()
        added = basic_jobs.async_double.configure(client=client).enqueue(4)  # no loop yet
        assert worker.queues == ("basic",) and row(db, ref.id)["state"] == "ready"
        worker.reload(jobs)  # queues follow the new registry: basic and other
        assert worker.queues == ("basic", "other")
        wait_for(lambda: row(db, ref.id)["state"] == "done", timeout=10, what="the new queue's job")
        wait_for(lambda: row(db, added.id)["output"] == 8, timeout=10, what="the new async job")
        idle(db, worker, "basic", "other")  # waiting on both queues now
        later = basic_jobs.other_queue.configure(
            client=client
        ).enqueue()  # NOTIFY on "other" wakes it
        wait_for(lambda: row(db, later.id)["state"] == "done", timeout=10, what="a notified claim")
    finally:
        worker.stop(timeout_s=2)


def test_reload_keeps_configured_queues_and_refuses_new_names_on_a_process_pool(dsn: str) -> None:
    from ujobs_bridge import ConfigError

    jobs = from_module(basic_jobs)
    worker = Worker(
        dsn, {"apps.basic_jobs.add": jobs["apps.basic_jobs.add"]}, WorkerConfig(queues=("basic",))
    )
    worker.reload(jobs)
    assert worker.queues == ("basic",) and "apps.basic_jobs.other_queue" in worker.names
    worker.reload(jobs, queues=("basic", "other"))
    assert worker.claims.queues == ("basic", "other")
    with pytest.raises(ConfigError, match="no jobs"):
        worker.reload({})
    procs = Worker(
        dsn,
        {"apps.basic_jobs.add": jobs["apps.basic_jobs.add"]},
        WorkerConfig(pool="processes"),
        app_spec="apps.basic_jobs",
    )
    with pytest.raises(ConfigError, match="cannot add jobs"):
        procs.reload(jobs)
    procs.reload(
        {"apps.basic_jobs.add": jobs["apps.basic_jobs.add"]}, queues=("basic", "other")
    )  # new queues, same jobs: fine
    assert procs.queues == ("basic", "other")


def _claim_table_vacuums(db: psycopg.Connection[Any]) -> int:
    """Manual vacuums of x_job_claimable so far (the worker's; autovacuum counts apart)."""
    db.execute("select pg_stat_clear_snapshot()")
    found = db.execute(
        "select vacuum_count from pg_stat_user_tables where relname = 'x_job_claimable'"
    ).fetchone()
    assert found is not None
    return int(found[0])


@pytest.fixture
def no_autovacuum(db: Any) -> Iterator[None]:
    """Autovacuum off on x_job_claimable for the test: a vacuum of it running would make the
    worker's (SKIP_LOCKED) return at once, uncounted. Restored after (the database is the
    session's)."""
    db.execute("alter table x_job_claimable set (autovacuum_enabled = false)")
    try:
        yield
    finally:
        db.execute("alter table x_job_claimable reset (autovacuum_enabled)")


def test_a_worker_vacuums_the_claim_table_once_it_claimed_what_the_table_held(
    client: Client, make_worker: Any, db: Any, no_autovacuum: None
) -> None:
    # Each claim empties entries of x_job_claimable's index; the worker's own vacuum lets the
    # index reuse those pages at any claim rate (db/claim_table.py), autovacuum aside.
    n = claims.CLAIM_VACUUM_EVERY
    before = _claim_table_vacuums(db)
    client.enqueue_many([basic_jobs.add.call(i, 1) for i in range(n)])
    worker = make_worker(frozen=False, poll_s=0.05, concurrency=8)
    worker.start()
    wait_for(
        lambda: db.execute("select count(*) from x_jobs where state = 'done'").fetchone() == (n,),
        timeout=60,
        what=f"{n} jobs done",
    )
    assert _claim_table_vacuums(db) > before


def test_a_backlog_larger_than_the_claims_so_far_is_not_vacuumed_yet(
    client: Client, make_worker: Any, db: Any, no_autovacuum: None
) -> None:
    # A vacuum reads the whole table and index: with 3,000 jobs waiting, 1,000 claims do not
    # pay for one (a backlog of a million would be read again every thousand claims).
    client.enqueue_many([basic_jobs.add.call(i, 1) for i in range(3 * claims.CLAIM_VACUUM_EVERY)])
    db.execute("vacuum x_job_claimable")  # the statistics now count its 3,000 rows
    worker = make_worker()
    before = _claim_table_vacuums(db)
    worker.claims.tidy(claims.CLAIM_VACUUM_EVERY)
    assert _claim_table_vacuums(db) == before
    worker.claims.tidy(10 * claims.CLAIM_VACUUM_EVERY)  # more claims than it ever held
    assert _claim_table_vacuums(db) == before + 1


def test_a_claim_connection_killed_before_its_vacuum_is_reopened_for_it(
    make_worker: Any, db: Any, no_autovacuum: None
) -> None:
    worker = make_worker()
    with worker.claims.shared.using() as conn:
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
        timeout=30,
        what="the claim connection gone",
    )
    before = _claim_table_vacuums(db)
    worker.claims.tidy(claims.CLAIM_VACUUM_EVERY)  # checked on checkout: reopened, not raised
    assert _claim_table_vacuums(db) == before + 1


def test_a_vacuum_the_server_cancels_is_logged_once_and_the_claims_go_on(
    client: Client, make_worker: Any, db: Any, no_autovacuum: None, caplog: Any
) -> None:
    # A statement_timeout shorter than the vacuum (here made slow by the cost delay) cancels
    # it: not an outage, so no reconnect and no retry loop; a warning, once, and the claims.
    client.enqueue_many([basic_jobs.add.call(i, 1) for i in range(2000)])
    worker = make_worker(frozen=False)
    with worker.claims.shared.using() as conn:
        conn.execute("set vacuum_cost_delay = '100ms'")
        conn.execute("set vacuum_cost_limit = 1")
        conn.execute("set statement_timeout = '50ms'")
    before = _claim_table_vacuums(db)
    with caplog.at_level("WARNING", logger="ujobs.worker"):
        worker.claims.tidy(claims.CLAIM_VACUUM_EVERY)
        worker.claims.tidy(claims.CLAIM_VACUUM_EVERY)  # not tried again on that connection
    failed = [r for r in caplog.records if "claim_table_vacuum_failed" in r.getMessage()]
    assert len(failed) == 1 and "statement timeout" in failed[0].getMessage()
    assert _claim_table_vacuums(db) == before
    with worker.claims.shared.using() as conn:
        conn.execute("reset statement_timeout")
    assert worker.tick() > 0  # claimed, ran and settled on the same connection
