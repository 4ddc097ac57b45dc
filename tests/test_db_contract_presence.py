"""The ``db`` surface of worker presence and the remote-control mailbox (``db/nodes.py``,
``db/mailbox.py``), function by function, against real Postgres with an injected clock.
``test_db_contract.py`` counts this file among the contract tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from ujobs_bridge.db import mailbox, nodes

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
