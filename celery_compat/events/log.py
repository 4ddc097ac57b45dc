"""Read Celery's events back from Postgres: what a dashboard shows without a broker.

Why it exists: the bridge worker's events (``-E``) are kept in ``x_celery_events``
(``event_emitter.py`` writes them in batches), so the web dashboard can show workers and tasks as
Flower would, also after the broker is gone. ``read`` returns them in the order they were stored,
each as the dict Celery's event receiver would hand over (``type``, ``hostname``, ``timestamp``,
``clock``, ``uuid``, ...) plus ``id``, the cursor for the next call::

    from celery_compat.events import log as event_log
    with psycopg.connect(dsn) as conn:
        batch = event_log.read(conn, after_id=0, types=["worker-heartbeat"], limit=100)
        cursor = batch[-1]["id"] if batch else 0

Events last as long as the retention window (the ``purge`` job's cutoff); a worker flushes them
every quarter second or so, so the newest may be a moment behind the broker's copy.

What it is not: Celery's ``events.State`` (the reader folds the events itself) or a writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from celery_compat.db import events as events_db


def read(
    conn: psycopg.Connection[Any],
    *,
    after_id: int = 0,
    task_id: str | None = None,
    hostname: str | None = None,
    types: Sequence[str] | None = None,
    since: datetime | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """Events stored after ``after_id`` (oldest first), optionally only ``task_id``'s, one node's
    (``hostname``), some ``types``, or those at/after ``since``; at most ``limit``."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    rows = events_db.read_events(
        conn,
        after_id=after_id,
        task_id=task_id,
        hostname=hostname,
        types=types,
        since=since,
        limit=limit,
    )
    return [{**event, "id": event_id} for event_id, event in rows]
