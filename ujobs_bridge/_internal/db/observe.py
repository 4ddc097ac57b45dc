"""Observation reads in SQL: queue depth by state, jobs finished per minute, pick-up latency per
minute, outbox lag, one job's attempts.

Why it exists: the dashboard's overview, the ``/metrics`` scrape and ``health`` ask the same
questions of the database, every few seconds, of a table that may hold millions of done rows;
one statement per question (``sql/observe.sql``), each answered from indexes that settling a
finished job and renewing a lease never change (migrations 0012 and 0014), so those updates stay
HOT: the claim index, the suspended and dead-letter indexes, the lease table, and the per-minute
counts the settle keeps (``x_job_counts``) instead of an index on ``finished_at``; the claim
adds its pick-up latency there too, and the settle appends each attempt to ``x_job_attempts``
(migration 0016), both in the statement that already writes, not in a round trip of their own.

What it is not: the operator's per-job reads (``job_reads.py``) or the presence of workers
(``nodes.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.sql import q

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
    """Jobs that finished in the minute starting at ``minute``: ``state`` is ``done``, ``dead``
    (the dead letters) or the failure kind a package ended them with (``FAILURE``)."""

    minute: datetime
    state: str
    jobs: int


@dataclass(frozen=True, slots=True)
class MinuteLatency:
    """Jobs claimed in the minute starting at ``minute``, and the mean and largest of their
    waits from due (``max(run_at, created_at)``) to claim, in seconds."""

    minute: datetime
    picked: int
    mean_s: float
    max_s: float


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One attempt that ended: its number, who ran it, when it was claimed (None for an attempt
    claimed before migration 0016) and ended, how (``done``, ``dead``, ``cancelled``,
    ``retried``, ``snoozed``, ``handed_back``, ``sleeping``, ``waiting``, ``lost``: its lease
    ran out), and its error text (the traceback)."""

    attempt: int
    worker: str | None
    claimed_at: datetime | None
    finished_at: datetime
    outcome: str
    error: str | None


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


def observe_pickup_per_minute(
    conn: Conn, minutes: int, now: datetime | None
) -> list[MinuteLatency]:
    rows = conn.execute(q("observe_pickup_per_minute"), {"minutes": minutes, "now": now}).fetchall()
    return [MinuteLatency(r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows]


def observe_attempts(conn: Conn, job_id: UUID) -> list[AttemptRow]:
    rows = conn.execute(q("observe_attempts"), {"id": job_id}).fetchall()
    return [AttemptRow(int(r[0]), r[1], r[2], r[3], r[4], r[5]) for r in rows]
