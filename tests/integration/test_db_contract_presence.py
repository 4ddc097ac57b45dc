"""The ``db`` surface of worker presence and the remote-control mailbox (``db/nodes.py``,
``db/mailbox.py``), function by function, against real Postgres with an injected clock.
``test_db_contract.py`` counts this file among the contract tests."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db import mailbox, nodes, session

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def spec(worker_id: str = "h:1:a", name: str = "celery@h", **over: Any) -> nodes.NodeSpec:
    values: dict[str, Any] = {
        "worker_id": worker_id,
        "name": name,
        "hostname": "h",
        "pid": 1,
        "queues": ["a", "b"],
        "concurrency": 2,
        "pool": "threads",
        "info": {"registered": ["t"]},
    }
    values.update(over)
    return nodes.NodeSpec(**values)


def test_a_node_lives_while_renewed_and_is_reaped_once_expired(db: psycopg.Connection[Any]) -> None:
    assert nodes.node_register(db, spec(), 30.0, T0) == 0
    assert nodes.node_register(db, spec("h:2:b", "w2@h", queues=["b"]), 30.0, T0) == 0
    (one, _two) = nodes.nodes_live(db, T0 + timedelta(seconds=10))
    assert (one.name, one.queues, one.info) == ("celery@h", ["a", "b"], {"registered": ["t"]})
    assert nodes.nodes_per_queue(db, T0) == {"a": 1, "b": 2}
    assert nodes.nodes_fleet(db, T0) == 2
    assert nodes.node_heartbeat(db, spec(concurrency=5), 30.0, T0 + timedelta(seconds=20))
    at_40 = T0 + timedelta(seconds=40)
    assert [(n.name, n.concurrency) for n in nodes.nodes_live(db, at_40)] == [("celery@h", 5)]
    assert nodes.nodes_fleet(db, at_40) == 1  # w2's expired row is not counted, reaped or not
    assert nodes.node_reap(db, at_40) == ["w2@h"]
    assert not nodes.node_heartbeat(db, spec("h:2:b", "w2@h"), 30.0, at_40)  # gone: register again
    assert nodes.node_delete(db, "h:1:a") and not nodes.node_delete(db, "h:1:a")
    assert nodes.nodes_live(db, T0) == []


def test_requests_reach_their_nodes_once_and_replies_come_back(db: psycopg.Connection[Any]) -> None:
    after = nodes.node_register(db, spec(), 30.0, T0)
    db.execute("listen x_control")
    to_all = mailbox.ControlRequest(uuid.uuid4(), "ping", "{}", None, True)
    to_other = mailbox.ControlRequest(uuid.uuid4(), "ping", "{}", ["other@h"], True)
    seq = mailbox.control_send(db, to_all, 10.0, T0)
    mailbox.control_send(db, to_other, 10.0, T0)
    assert [n.payload for n in db.notifies(timeout=1, stop_after=2)] == [str(seq), str(seq + 1)]
    pending = mailbox.control_pending(db, "celery@h", after, T0)
    assert [(p.id, p.command, p.reply) for p in pending] == [(to_all.id, "ping", True)]
    assert mailbox.control_pending(db, "celery@h", seq, T0) == []
    assert mailbox.control_pending(db, "celery@h", after, T0 + timedelta(seconds=11)) == []
    mailbox.listen_replies(db, True)
    answer = mailbox.ControlReply("h:1:a", "celery@h", '{"ok": "pong"}')
    assert mailbox.control_reply(db, to_all.id, answer, 60.0, T0)
    assert not mailbox.control_reply(db, to_all.id, answer, 60.0, T0)  # once per worker process
    assert [n.payload for n in db.notifies(timeout=1, stop_after=1)] == [str(to_all.id)]
    mailbox.listen_replies(db, False)
    assert mailbox.control_replies(db, to_all.id) == [answer]
    assert mailbox.control_expire(db, T0 + timedelta(seconds=30)) == (2, 0)
    assert mailbox.control_expire(db, T0 + timedelta(seconds=90)) == (0, 1)
    db.execute("unlisten x_control")
    mailbox.listen_requests(db)  # what a worker's listener issues on each connection
    later = mailbox.ControlRequest(uuid.uuid4(), "stats", "{}", ["celery@h"], False)
    seq = mailbox.control_send(db, later, 10.0, None)
    assert [n.payload for n in db.notifies(timeout=1, stop_after=1)] == [str(seq)]


def _job(queue: str, name: str = "t") -> enqueue_db.EnqueueSpec:
    return enqueue_db.EnqueueSpec(
        id=uuid.uuid4(), name=name, queue=queue, input_json=json.dumps({}), max_attempts=1
    )


def test_an_insert_wakes_only_a_queue_a_registered_worker_waits_for(
    db: psycopg.Connection[Any],
) -> None:
    """0021: an insert notifies x_jobs_ready only for a queue some worker has marked as waited
    for, single rows and batches alike. A mark belongs to a registered node: none is made for
    an unknown one, a mark asserted again is kept as it was, and the marks leave with the node,
    whether it is deleted (a clean exit) or reaped (a killed worker)."""
    assert nodes.queue_waiting_mark(db, "h:1:a", ["a"], T0) == (False, 0)  # no node yet
    nodes.node_register(db, spec(), 30.0, T0)
    db.execute("listen x_jobs_ready")

    def woken() -> set[str]:
        return {n.payload for n in db.notifies(timeout=0.3)}

    enqueue_db.job_enqueue(db, _job("a"), None)
    enqueue_db.job_enqueue_many(db, [_job("b"), _job("b")], None)
    assert woken() == set()  # nobody waits: no notification
    assert nodes.queue_waiting_mark(db, "h:1:a", ["a", "b"], T0) == (True, 2)
    assert nodes.queue_waiting_mark(db, "h:1:a", ["a", "b"], T0 + timedelta(seconds=5)) == (True, 0)
    assert nodes.queue_waiters(db) == [("a", "h:1:a", T0), ("b", "h:1:a", T0)]
    enqueue_db.job_enqueue(db, _job("a"), None)
    enqueue_db.job_enqueue_many(db, [_job("b"), _job("b"), _job("c")], None)
    assert woken() == {"a", "b"}  # c: nobody waits for it
    nodes.queue_waiting_unmark(db, "h:1:a")
    assert nodes.queue_waiters(db) == []
    enqueue_db.job_enqueue(db, _job("a"), None)
    assert woken() == set()
    assert nodes.queue_waiting_mark(db, "h:1:a", ["a"], T0) == (True, 1)
    assert nodes.node_reap(db, T0 + timedelta(seconds=31)) == ["celery@h"]
    assert nodes.queue_waiters(db) == []  # reaped with its node
    nodes.node_register(db, spec(), 30.0, T0)
    assert nodes.queue_waiting_mark(db, "h:1:a", ["a"], T0) == (True, 1)
    assert nodes.node_delete(db, "h:1:a")
    assert nodes.queue_waiters(db) == []  # deleted with its node


def test_an_insert_wakes_one_waiting_worker_per_ready_job_on_its_own_channel(
    db: psycopg.Connection[Any],
) -> None:
    """0025: each mark names its worker's own channel, and an insert notifies at most as many
    marked workers of the queue as it made jobs ready, one notification each; nothing goes to
    ``x_jobs_ready`` then. A mark without a channel (an older worker's) still gets
    ``x_jobs_ready``."""
    channels = {}
    for n in range(3):
        worker_id = f"h:{n}:w"
        nodes.node_register(db, spec(worker_id, f"w{n}@h"), 30.0, T0)
        channels[worker_id] = session.wake_channel(f"{n:02x}" * 8)
        assert nodes.queue_waiting_mark(db, worker_id, ["a"], T0, channels[worker_id]) == (True, 1)
        session.listen_for_wake(db, channels[worker_id])
    db.execute("listen x_jobs_ready")
    assert sorted(c for _q, _w, c in nodes.queue_waiter_channels(db)) == sorted(channels.values())

    def woken() -> list[tuple[str, str]]:
        return sorted((n.channel, n.payload) for n in db.notifies(timeout=0.3))

    enqueue_db.job_enqueue(db, _job("a"), None)
    (one,) = woken()
    assert one[0] in channels.values() and one[1] == "a"
    enqueue_db.job_enqueue_many(db, [_job("a"), _job("a")], None)
    two = woken()
    assert len(two) == 2 and len({c for c, _p in two}) == 2  # two jobs: two workers
    enqueue_db.job_enqueue_many(db, [_job("a") for _ in range(5)] + [_job("b")], None)
    assert {c for c, _p in woken()} == set(channels.values())  # five jobs, three workers
    nodes.node_register(db, spec("h:9:old", "old@h"), 30.0, T0)
    assert nodes.queue_waiting_mark(db, "h:9:old", ["a"], T0) == (True, 1)  # no channel
    enqueue_db.job_enqueue(db, _job("a"), None)
    got = [c for c, _p in woken()]
    assert "x_jobs_ready" in got and len(got) == 2  # the older worker's, and one channel
    assert set(got) - {"x_jobs_ready"} <= set(channels.values())


def test_a_one_row_insert_hands_its_job_to_a_live_armed_worker_that_runs_its_name(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    """0027: a mark armed for hand-offs (``HandOffs``) gets the job itself, written as its
    worker's running claim, only while a session holds the mark's lock key; the hand-off
    disarms the mark until ``queue_waiting_arm``; a job of a name the worker does not run, or
    one arriving while the key is not held, is only woken. ``job_handed_unknown`` finds the
    hand-offs the worker does not hold, in a claim's shape."""
    nodes.node_register(db, spec("h:1:a", "w1@h"), 30.0, T0)
    wake = session.wake_channel("ab" * 8)
    hand = session.hand_channel(wake)
    offer = nodes.HandOffs(names=("t",), lease_s=30.0, lock_key=4242, channel=hand)
    assert nodes.queue_waiting_mark(db, "h:1:a", ["a"], T0, wake, offer) == (True, 1)
    own = enqueue_db.OwnEnqueues()

    def state(job_id: uuid.UUID) -> tuple[Any, ...] | None:
        return db.execute(
            "select state, attempt, claimed_by from x_jobs where id = %s", (job_id,)
        ).fetchone()

    with (
        psycopg.connect(dsn, autocommit=True) as sender,
        psycopg.connect(dsn, autocommit=True) as listen,
    ):
        session.listen_for_wake(listen, wake)
        session.listen_for_wake(listen, hand)
        unheld = _job("a")
        own.enqueue(sender, unheld, None, None)
        assert state(unheld.id) == ("ready", 0, None)  # nobody holds the key: woken only
        assert [n.channel for n in listen.notifies(timeout=0.3)] == [wake]
        assert session.hold_hand_off_lock(listen, 4242)
        with psycopg.connect(dsn, autocommit=True) as other:
            assert not session.hold_hand_off_lock(other, 4242)  # held by another session
        other_name = _job("a", "u")
        own.enqueue(sender, other_name, None, None)
        assert state(other_name.id) == ("ready", 0, None)
        assert [n.channel for n in listen.notifies(timeout=0.3)] == [wake]
        handed = _job("a")
        own.enqueue(sender, handed, None, None)
        assert state(handed.id) == ("running", 1, "h:1:a")
        leased = db.execute("select count(*) from x_job_leases where job_id = %s", (handed.id,))
        assert leased.fetchone() == (1,)  # one hand-off, one lease row
        (note,) = listen.notifies(timeout=1, stop_after=1)
        got = leases_db.handed_job(note.payload)
        assert note.channel == hand and got is not None
        assert (got.id, got.name, got.queue, got.input, got.attempt) == (handed.id, "t", "a", {}, 1)
        assert leases_db.handed_job("a") is None  # a wake's payload is no hand-off
        disarmed = _job("a")
        own.enqueue(sender, disarmed, None, None)
        assert state(disarmed.id) == ("ready", 0, None)  # the hand-off disarmed the mark
        assert nodes.queue_waiting_arm(db, "h:1:a") == 1
        # found after an outage longer than its lease: its lease is renewed as it is found, so
        # a rescue does not take it back while its body runs
        db.execute(
            "update x_jobs set lease_expires_at = now() - interval '1 minute' where id = %s",
            (handed.id,),
        )
        (unknown,) = leases_db.job_handed_unknown(db, "h:1:a", [], None, 5.0)
        assert (unknown.id, unknown.lease_token) == (got.id, got.lease_token)
        left = db.execute(
            "select lease_expires_at - now() from x_jobs where id = %s", (handed.id,)
        ).fetchone()
        assert left is not None and timedelta(seconds=29) < left[0] <= timedelta(seconds=30)
        assert leases_db.job_handed_unknown(db, "h:1:a", [got.id], None, 5.0) == []
