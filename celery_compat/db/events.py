"""Celery's events in SQL: write a batch, read them back in order, purge the old ones.

Why it exists: the bridge worker's task and worker events (``celery_compat/event_emitter.py``)
are kept in ``x_celery_events`` so a dashboard can read them without a broker; the statements
live in ``sql/events.sql`` and run only here.

What it is not: the emitter (batching, the broker copy) or the reader's API
(``celery_compat/event_log.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from celery_compat.db import q

Conn = psycopg.Connection[Any]


def insert_events(conn: Conn, events: Sequence[dict[str, Any]]) -> int:
    """Insert ``events`` (Celery event dicts) in one statement; returns how many. A value JSON
    cannot carry is written as its ``str``."""
    if not events:
        return 0
    payload = json.dumps(list(events), default=str)
    cur = conn.execute(q("celery_events_insert"), {"events": payload})
    return cur.rowcount


def read_events(
    conn: Conn,
    *,
    after_id: int = 0,
    task_id: str | None = None,
    hostname: str | None = None,
    types: Sequence[str] | None = None,
    since: datetime | None = None,
    limit: int = 1000,
) -> list[tuple[int, dict[str, Any]]]:
    """``(id, event)`` pairs after ``after_id``, oldest first, filtered as asked."""
    params = {
        "after_id": after_id,
        "task_id": task_id,
        "hostname": hostname,
        "types": list(types) if types is not None else None,
        "since": since,
        "limit": limit,
    }
    rows = conn.execute(q("celery_events_read"), params).fetchall()
    return [(int(r[0]), dict(r[1])) for r in rows]


def purge_events(conn: Conn, cutoff: datetime, limit: int) -> int:
    """Delete up to ``limit`` events whose timestamp is before ``cutoff``; returns how many."""
    cur = conn.execute(q("celery_events_purge"), {"cutoff": cutoff, "limit": limit})
    return cur.rowcount
