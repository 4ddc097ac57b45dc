"""Connection-level statements (``sql/session.sql``): LISTEN channels, commit modes, the
database's clock, the embedded database's creation.

Why it exists: these statements belong to no table, but they are SQL all the same, and the
engine's SQL is executed only inside ``ujobs_bridge._internal.db``.

What it is not: the connection policy (``connections.py``) or a listener loop
(``ujobs_bridge._internal.worker.listener``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]


def listen_for_jobs(conn: Conn) -> None:
    """LISTEN on ``x_jobs_ready`` (payload: a queue with new work) and ``x_jobs_cancel``
    (payload: a cancelled job's id)."""
    conn.execute(q("listen_ready"))
    conn.execute(q("listen_cancel"))


def listen_for_wake(conn: Conn, channel: str) -> None:
    """LISTEN on a worker's own channel (``wake_channel``): its marks name it, so an insert
    wakes this worker alone."""
    conn.execute(sql.SQL(q("listen_wake")).format(channel=sql.Identifier(channel)))


def wake_channel(token: str) -> str:
    """The channel a worker listens on alone, from a token of lowercase hex (its random part):
    a name Postgres keeps as it is (under 64 bytes, no case folding once quoted)."""
    if not token or len(token) > 40 or any(c not in "0123456789abcdef" for c in token):
        raise ValueError(f"a wake channel token is 1-40 lowercase hex digits, not {token!r}")
    return f"x_jobs_wake_{token}"


def hand_channel(wake: str) -> str:
    """The channel a worker's hand-offs come on (0027), beside its wake channel ``wake``."""
    return "x_jobs_hand_" + wake.removeprefix("x_jobs_wake_")


def hold_hand_off_lock(conn: Conn, lock_key: int) -> bool:
    """Take this worker's hand-off lock key for the life of ``conn``'s session (its listen
    connection): senders hand jobs only to a worker whose key is held. False: another session
    holds it (a worker whose key collides), and this worker must not be armed."""
    row = conn.execute(q("hand_off_lock"), {"lock_key": lock_key}).fetchone()
    return bool(row and row[0])


def claims_commit_async(conn: Conn) -> None:
    """This session's commits do not wait for the WAL flush (the claim connection; see the
    statement's comment for why that is safe)."""
    conn.execute(q("session_claims_async"))


def transaction_idle_limit(conn: Conn, ms: int) -> None:
    """Inside a transaction: the server ends it if it stays idle longer than ``ms``."""
    conn.execute(q("tx_idle_limit"), {"ms": str(int(ms))})


def outcomes_commit_durable(conn: Conn) -> None:
    """Inside a transaction: this commit waits for the WAL flush (outcomes are durable)."""
    conn.execute(q("tx_outcomes_durable"))


def database_now(conn: Conn) -> datetime:
    """The database's clock."""
    row = conn.execute(q("database_now")).fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def ensure_ujobs_database(conn: Conn, name: str) -> bool:
    """Create the embedded server's ``ujobs`` database unless it exists; True if created."""
    if conn.execute(q("database_exists"), {"name": name}).fetchone() is not None:
        return False
    conn.execute(q("database_create_ujobs"))
    return True
