"""Revoked task ids in SQL: record (and NOTIFY) a revoke, read it back, LISTEN for new ones.

Why it exists: a revoke must reach every worker and every later send of the id, so it is a row
(``x_celery_revoked``) written with its notification in one statement.

What it is not: the in-memory set of recently revoked ids a worker keeps (``revoked_ids.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from celery_compat.db import q

Conn = psycopg.Connection[Any]


def revoke(conn: Conn, task_id: str, *, terminate: bool) -> None:
    conn.execute(q("celery_revoke"), {"task_id": task_id, "terminate": terminate})


def revoked_terminate(conn: Conn, task_id: str) -> bool | None:
    """``None`` if ``task_id`` was never revoked, else whether the revoke asked to terminate."""
    row = conn.execute(q("celery_revoked_terminate"), {"task_id": task_id}).fetchone()
    return None if row is None else bool(row[0])


def listen_revoked(conn: Conn) -> None:
    conn.execute(q("listen_celery_revoked"))


def revoked_recent(
    conn: Conn, window_s: float, now: datetime | None = None
) -> list[tuple[str, float]]:
    """``(task id, age in seconds)`` of the ids revoked within ``window_s``, oldest first."""
    params = {"window_s": window_s, "now": now}
    rows = conn.execute(q("celery_revoked_recent"), params).fetchall()
    return [(str(r[0]), float(r[1])) for r in rows]
