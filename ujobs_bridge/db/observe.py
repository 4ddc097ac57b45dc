"""Observation reads in SQL: queue depth by state, jobs finished per minute, outbox lag.

Why it exists: the dashboard's overview, the ``/metrics`` scrape and ``health`` ask the same
questions of the database, every few seconds, of a table that may hold millions of done rows;
one statement per question (``sql/observe.sql``), each answered from indexes that settling a
finished job and renewing a lease never change (migrations 0012 and 0014), so those updates stay
HOT: the claim index, the suspended and dead-letter indexes, the lease table, and the per-minute
counts the settle keeps (``x_job_counts``) instead of an index on ``finished_at``.

What it is not: the operator's per-job reads (``jobs.py``) or the presence of workers
(``nodes.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from .sql import q

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class Depth:
    """Jobs of one queue in one shown state (``scheduled``: ready, not yet due); ``oldest_due``
    (on the ``ready`` row only) the earliest run_at among jobs a worker could claim now: ready
    ones, and sleeping or waiting ones whose time has come."""

    queue: str
    state: str
    jobs: int
    oldest_due: datetime | None


@dataclass(frozen=True, slots=True)
class MinuteCount:
    """Jobs that finished ``done`` or ``dead`` (``state``) in the minute starting at ``minute``."""

    minute: datetime
    state: str
    jobs: int


def observe_depth(conn: Conn, now: datetime | None) -> list[Depth]:
    rows = conn.execute(q("observe_depth"), {"now": now}).fetchall()
    return [Depth(r[0], r[1], int(r[2]), r[3]) for r in rows]


def observe_finished_per_minute(
    conn: Conn, minutes: int, now: datetime | None
) -> list[MinuteCount]:
    rows = conn.execute(
        q("observe_finished_per_minute"), {"minutes": minutes, "now": now}
    ).fetchall()
    return [MinuteCount(r[0], r[1], int(r[2])) for r in rows]


def observe_outbox_lag(conn: Conn, now: datetime | None) -> tuple[int, float]:
    """(rows staged and not published, seconds since the oldest of them was staged)."""
    row = conn.execute(q("observe_outbox_lag"), {"now": now}).fetchone()
    return (int(row[0]), float(row[1])) if row else (0, 0.0)
