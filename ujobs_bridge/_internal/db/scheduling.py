"""The scheduler's statements (``sql/scheduling.sql``): the leader lease, watermarks, fires.

Why it exists: the leader and the scheduler decide WHEN to write; this module is the only code
that knows HOW. Lease statements compare only with the database's ``now()`` (no local time ever
reaches them); a fire is one (task, occurrence) row whose unique key is the guarantee against
firing twice.

What it is not: the leader's trust window or the round's plan (``ujobs_bridge._internal.scheduling``).
Each function runs on the connection it is given, inside whatever transaction the caller holds.
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
class LeaderTerm:
    """Who asks for the lease of ``group``, and for how long (``term``: the one it holds)."""

    group: str
    holder: str
    ttl_s: float
    term: int | None = None


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    holder: str
    term: int
    live: bool


@dataclass(frozen=True, slots=True)
class FireParams:
    """One occurrence of a task and the ids of the jobs it enqueues."""

    task: str
    occurrence_at: datetime
    catch_up: bool
    job_ids: tuple[UUID, ...]


def leader_elect(conn: Conn, lease: LeaderTerm) -> int | None:
    """Take the lease if nobody holds it or it ran out; the new term if WE now hold it."""
    row = conn.execute(
        q("leader_elect"), {"name": lease.group, "holder": lease.holder, "ttl_s": lease.ttl_s}
    ).fetchone()
    if row is None or row[0] != lease.holder:
        return None
    return int(row[1])


def leader_renew(conn: Conn, lease: LeaderTerm) -> bool:
    """Extend OUR term (matched by holder and term, only while unexpired); False: it is lost."""
    if lease.term is None:
        return False
    row = conn.execute(
        q("leader_renew"),
        {"name": lease.group, "holder": lease.holder, "ttl_s": lease.ttl_s, "term": lease.term},
    ).fetchone()
    return row is not None


def leader_resign(conn: Conn, lease: LeaderTerm) -> None:
    """Expire our term at once so a successor need not wait out the ttl."""
    conn.execute(
        q("leader_resign"), {"name": lease.group, "holder": lease.holder, "term": lease.term}
    )


def leader_get(conn: Conn, group: str) -> LeaderInfo | None:
    row = conn.execute(q("leader_get"), {"name": group}).fetchone()
    return None if row is None else LeaderInfo(str(row[0]), int(row[1]), bool(row[4]))


def scheduler_fire(conn: Conn, fire: FireParams) -> bool:
    """Record one (task, occurrence); False when it was fired already (by anyone)."""
    row = conn.execute(
        q("scheduler_fire"),
        {
            "task": fire.task,
            "occurrence_at": fire.occurrence_at,
            "catch_up": fire.catch_up,
            "job_ids": list(fire.job_ids),
        },
    ).fetchone()
    return row is not None


def scheduler_watermark_set(conn: Conn, task: str, watermark: datetime) -> None:
    """Move ``task``'s watermark forward (never back)."""
    conn.execute(q("scheduler_watermark_set"), {"task": task, "watermark": watermark})


def watermarks(conn: Conn) -> dict[str, datetime]:
    """Each task's durable watermark: every occurrence at or before it has been decided."""
    return {str(r[0]): r[1] for r in conn.execute(q("scheduler_watermarks")).fetchall()}


def last_fires(conn: Conn) -> dict[str, tuple[datetime, bool, datetime]]:
    """Each task's latest fire: (occurrence, was it a catch-up, when it was recorded)."""
    rows = conn.execute(q("scheduler_last_fires")).fetchall()
    return {str(r[0]): (r[1], bool(r[2]), r[3]) for r in rows}
