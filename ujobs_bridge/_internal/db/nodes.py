"""Worker nodes in SQL (``sql/nodes.sql``): register, renew, delete, reap, and the live reads.

Why it exists: a worker's presence is a row of ``x_worker_nodes`` renewed by its heartbeat, so
"which workers are alive, and on which queues" is one query for the CLI, a dashboard, a health
check or ``inspect`` (Celery answers it by broadcasting and counting replies). Expired rows are
skipped by every read and deleted by any worker's sweep.

What it is not: the heartbeat loop (``ujobs_bridge._internal.worker.presence``) or the mailbox
(``mailbox.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What a worker process says about itself: its identity, what it consumes and ``info``
    (JSON-able: what ``inspect`` reads)."""

    worker_id: str
    name: str
    hostname: str
    pid: int
    queues: Sequence[str]
    concurrency: int
    pool: str
    info: Mapping[str, Any]

    def params(self, ttl_s: float, now: datetime | None) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "name": self.name,
            "hostname": self.hostname,
            "pid": self.pid,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "pool": self.pool,
            "info": json.dumps(dict(self.info), default=str),
            "ttl_s": ttl_s,
            "now": now,
        }


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A live node as read back."""

    worker_id: str
    name: str
    hostname: str
    pid: int
    queues: list[str]
    concurrency: int
    pool: str
    info: dict[str, Any]
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime


def node_register(conn: Conn, spec: NodeSpec, ttl_s: float, now: datetime | None) -> int:
    """Insert or refresh the node (its ``started_at`` kept); returns the highest request seq sent
    so far (the node handles later ones only)."""
    params = spec.params(ttl_s, now) | {"started_at": None}
    row = conn.execute(q("node_register"), params).fetchone()
    assert row is not None
    return int(row[0])


def node_heartbeat(conn: Conn, spec: NodeSpec, ttl_s: float, now: datetime | None) -> bool:
    """Renew the node for ``ttl_s`` and refresh what it reports; False: it is gone (reaped), and
    the caller registers it again."""
    return conn.execute(q("node_heartbeat"), spec.params(ttl_s, now)).fetchone() is not None


def node_delete(conn: Conn, worker_id: str) -> bool:
    """Remove the node (a clean exit); False if it was not there."""
    return conn.execute(q("node_delete"), {"worker_id": worker_id}).fetchone() is not None


def node_reap(conn: Conn, now: datetime | None) -> list[str]:
    """Delete expired nodes; returns their names."""
    return [str(r[0]) for r in conn.execute(q("node_reap"), {"now": now}).fetchall()]


@dataclass(frozen=True, slots=True)
class HandOffs:
    """What a worker's marks offer for hand-offs (0027): the task ``names`` it runs, its
    ``lease_s``, the ``lock_key`` its listen session holds and the ``channel`` it hears
    hand-offs on."""

    names: tuple[str, ...]
    lease_s: float
    lock_key: int
    channel: str


def queue_waiting_mark(
    conn: Conn,
    worker_id: str,
    queues: Sequence[str],
    now: datetime | None,
    channel: str | None = None,
    hand_offs: HandOffs | None = None,
) -> tuple[bool, int]:
    """Mark ``queues`` as waited for by this worker (0021: inserts into them then wake it; 0025:
    on ``channel``, the one it listens on alone, or on ``x_jobs_ready`` when None; 0027: armed
    for ``hand_offs`` when given). Returns (registered, added): not registered (its node was
    reaped, or is not back yet after an outage), nothing is marked and its poll wakes it until
    it is; ``added``: the marks that were not there before."""
    row = conn.execute(
        q("queue_waiting_mark"),
        {
            "worker_id": worker_id,
            "queues": list(queues),
            "now": now,
            "channel": channel,
            "names": list(hand_offs.names) if hand_offs else None,
            "lease_s": hand_offs.lease_s if hand_offs else None,
            "lock_key": hand_offs.lock_key if hand_offs else None,
            "hand_channel": hand_offs.channel if hand_offs else None,
        },
    ).fetchone()
    assert row is not None
    return bool(row[0]), int(row[1])


def queue_waiting_arm(conn: Conn, worker_id: str) -> int:
    """Arm this worker's marks again after a hand-off disarmed them; answers how many."""
    row = conn.execute(q("queue_waiting_arm"), {"worker_id": worker_id}).fetchone()
    return int(row[0]) if row else 0


def queue_waiting_unmark(conn: Conn, worker_id: str) -> None:
    """Remove this worker's marks: its claims fill its slots, no insert needs to wake it."""
    conn.execute(q("queue_waiting_unmark"), {"worker_id": worker_id})


def queue_waiters(conn: Conn) -> list[tuple[str, str, datetime]]:
    """Every mark, as (queue, worker_id, since), by queue."""
    return [(str(r[0]), str(r[1]), r[2]) for r in conn.execute(q("queue_waiters")).fetchall()]


def queue_waiter_channels(conn: Conn) -> list[tuple[str, str, str | None]]:
    """Every mark, as (queue, worker_id, channel), by queue."""
    rows = conn.execute(q("queue_waiter_channels")).fetchall()
    return [(str(r[0]), str(r[1]), r[2]) for r in rows]


def nodes_live(conn: Conn, now: datetime | None) -> list[NodeRecord]:
    """Every node not yet expired, by name."""
    rows = conn.execute(q("nodes_live"), {"now": now}).fetchall()
    return [
        NodeRecord(
            worker_id=r[0],
            name=r[1],
            hostname=r[2],
            pid=r[3],
            queues=list(r[4]),
            concurrency=r[5],
            pool=r[6],
            info=dict(r[7] or {}),
            started_at=r[8],
            heartbeat_at=r[9],
            expires_at=r[10],
        )
        for r in rows
    ]


def nodes_fleet(conn: Conn, now: datetime | None) -> int:
    """How many nodes are live (not yet expired), this one included once it is registered."""
    row = conn.execute(q("nodes_fleet"), {"now": now}).fetchone()
    return int(row[0]) if row else 0


def nodes_per_queue(conn: Conn, now: datetime | None) -> dict[str, int]:
    """Live worker processes per consumed queue (a queue nobody consumes is absent)."""
    return {str(r[0]): int(r[1]) for r in conn.execute(q("nodes_per_queue"), {"now": now})}
