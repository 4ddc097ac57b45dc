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

from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]


def listen_for_jobs(conn: Conn) -> None:
    """LISTEN on ``x_jobs_ready`` (payload: a queue with new work) and ``x_jobs_cancel``
    (payload: a cancelled job's id)."""
    conn.execute(q("listen_ready"))
    conn.execute(q("listen_cancel"))


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
