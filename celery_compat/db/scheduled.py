"""The rows behind ``inspect scheduled``: Celery messages waiting in Postgres for a future time.

Why it exists: a Celery worker lists the ETA/countdown messages it holds in its timer; a bridge
worker holds none (they wait as job rows whose ``run_at`` is in the future until a claim takes
them). So a worker answers with those rows instead, for the queues it consumes, each queue
reported by one live node (the statement says which), so that the replies of a fleet together
count each message once. Bounded: a page of at most ``limit`` rows after a keyset.

What it is not: the reply's shape (``worker_control.scheduled_info``) or a claim (nothing is locked).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from celery_compat.db import q

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class ScheduledRow:
    id: UUID
    name: str
    queue: str
    priority: int
    run_at: datetime
    deliveries: int
    input: Any


def scheduled(
    conn: Conn,
    *,
    worker_id: str,
    queues: Sequence[str],
    limit: int,
    now: datetime | None = None,
    after: tuple[datetime, UUID] | None = None,
) -> list[ScheduledRow]:
    """The rows waiting for a future ``run_at`` on ``queues`` that ``worker_id`` reports, in
    ``(run_at, id)`` order after ``after``, at most ``limit``; ``now``: None is the database's."""
    params = {
        "worker_id": worker_id,
        "queues": list(queues),
        "limit": max(0, int(limit)),
        "now": now,
        "after_run_at": after[0] if after else None,
        "after_id": after[1] if after else None,
    }
    with conn.transaction():
        conn.execute(q("celery_scheduled_without_jit"))
        rows = conn.execute(q("celery_scheduled"), params).fetchall()
    return [ScheduledRow(r[0], r[1], r[2], int(r[3]), r[4], int(r[5]), r[6]) for r in rows]
