"""The remote-control mailbox in SQL (``sql/nodes.sql``): send a request, read pending requests,
reply, read replies, expire both.

Why it exists: remote control (asking and steering running workers) needs requests that reach
live workers and replies that reach the caller, with no broker. A request is a row of
``x_control_requests`` sent with a NOTIFY at its commit (workers wake on their existing LISTEN
connection, and poll as a floor), and each worker process writes its reply as a row of
``x_control_replies`` with a NOTIFY that wakes the caller. Both expire and are deleted by any worker's sweep.

What it is not: what a command does (``ujobs_bridge._internal.worker.control``) or the waiting caller
(``ujobs_bridge._internal.worker.remote``). Arguments and replies are JSON text, encoded by the callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]

REQUEST_CHANNEL = "x_control"
REPLY_CHANNEL = "x_control_reply"


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """One request: ``arguments`` is JSON text; ``destination`` None is every node."""

    id: UUID
    command: str
    arguments: str
    destination: Sequence[str] | None
    reply: bool


@dataclass(frozen=True, slots=True)
class PendingRequest:
    id: UUID
    seq: int
    command: str
    arguments: str
    reply: bool


@dataclass(frozen=True, slots=True)
class ControlReply:
    worker_id: str
    node: str
    reply: str  # JSON text


def control_send(conn: Conn, request: ControlRequest, ttl_s: float, now: datetime | None) -> int:
    """Store the request and NOTIFY it at the same commit; returns its seq."""
    row = conn.execute(
        q("control_send"),
        {
            "id": request.id,
            "command": request.command,
            "arguments": request.arguments,
            "destination": None if request.destination is None else list(request.destination),
            "reply": request.reply,
            "ttl_s": ttl_s,
            "now": now,
        },
    ).fetchone()
    assert row is not None
    return int(row[0])


def control_pending(
    conn: Conn, name: str, after_seq: int, now: datetime | None
) -> list[PendingRequest]:
    """Unexpired requests after ``after_seq`` addressed to node ``name`` or to every node."""
    rows = conn.execute(
        q("control_pending"), {"name": name, "after_seq": after_seq, "now": now}
    ).fetchall()
    return [PendingRequest(r[0], int(r[1]), r[2], r[3], bool(r[4])) for r in rows]


def control_reply(
    conn: Conn,
    request_id: UUID,
    reply: ControlReply,
    ttl_s: float,
    now: datetime | None,
) -> bool:
    """Store one worker process's reply and NOTIFY the caller; False if it had replied already."""
    row = conn.execute(
        q("control_reply"),
        {
            "request_id": request_id,
            "worker_id": reply.worker_id,
            "node": reply.node,
            "reply": reply.reply,
            "ttl_s": ttl_s,
            "now": now,
        },
    ).fetchone()
    return row is not None


def control_replies(conn: Conn, request_id: UUID) -> list[ControlReply]:
    """The replies to ``request_id`` so far, in arrival order."""
    rows = conn.execute(q("control_replies"), {"request_id": request_id}).fetchall()
    return [ControlReply(r[0], r[1], r[2]) for r in rows]


def control_expire(conn: Conn, now: datetime | None) -> tuple[int, int]:
    """Delete expired requests and replies; returns (requests, replies) deleted."""
    row = conn.execute(q("control_expire"), {"now": now}).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def listen_requests(conn: Conn) -> None:
    """LISTEN on ``x_control`` (payload: a new request's seq)."""
    conn.execute(q("listen_control"))


def listen_replies(conn: Conn, on: bool) -> None:
    """LISTEN (``on``) or UNLISTEN on ``x_control_reply`` (payload: a request id)."""
    conn.execute(q("listen_control_reply") if on else q("unlisten_control_reply"))
