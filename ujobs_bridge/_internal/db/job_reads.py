"""The reads of jobs in SQL (``sql/jobs.sql``): one job, a filtered page, dead letters, counts.

Why it exists: the CLI's ``jobs`` (through ``introspect.py``), the dashboard's job pages and the
test kit show a job as the same ``JobRecord`` whichever read found it; a page of ``job_list`` is
read by key in creation order (``before``), so a deep page costs what the first does.

What it is not: a write (``steering.py`` cancels and requeues) or the observation reads the
dashboard overview and ``/metrics`` poll (``observe.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.records import JobRecord, JobState, QueueStat

Conn = psycopg.Connection[Any]


def _record(row: dict[str, Any]) -> JobRecord:
    row["state"] = JobState(row["state"])
    return JobRecord(**row)


def job_get(conn: Conn, job_id: UUID) -> JobRecord | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(q("job_get"), {"id": job_id}).fetchone()
    return None if row is None else _record(row)


def like_literal(text: str) -> str:
    """``text`` as a LIKE pattern matching exactly itself (``\\``, ``%`` and ``_`` escaped)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def job_list(
    conn: Conn,
    *,
    state: str | None,
    queue: str | None,
    name: str | None,
    limit: int,
    name_like: str | None = None,
    ids: Sequence[UUID] | None = None,
    offset: int = 0,
    since: datetime | None = None,
    until: datetime | None = None,
    before: tuple[datetime, UUID] | None = None,
    kind: str | None = None,
) -> list[JobRecord]:
    """Newest first. ``name`` matches exactly, ``name_like`` is a LIKE pattern (``name`` wins);
    ``ids`` narrows to those rows; ``since``/``until`` bound ``created_at`` (until excluded);
    paged by ``limit`` and by key: ``before`` is the (created_at, id) of the last row of the
    previous page (read from the creation-order index, however deep), ``offset`` skips rows.
    State ``dead`` lists the dead letters, or with ``kind`` the dead rows of that failure kind."""
    params = {
        "before_at": before[0] if before is not None else None,
        "before_id": before[1] if before is not None else None,
        "state": state,
        "kind": kind,
        "queue": queue,
        "name_like": like_literal(name) if name is not None else name_like,
        "ids": list(ids) if ids is not None else None,
        "limit": limit,
        "offset": offset,
        "since": since,
        "until": until,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(q("job_list"), params).fetchall()
    return [_record(r) for r in rows]


def job_dead(
    conn: Conn,
    *,
    limit: int,
    queue: str | None = None,
    name_like: str | None = None,
    offset: int = 0,
) -> list[JobRecord]:
    """Dead letters (no failure kind), most recently dead first; filtered by queue and a LIKE pattern, paged."""
    params = {"limit": limit, "queue": queue, "name_like": name_like, "offset": offset}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(q("job_dead"), params).fetchall()
    return [_record(r) for r in rows]


def job_stats(conn: Conn) -> list[QueueStat]:
    rows = conn.execute(q("job_stats")).fetchall()
    return [QueueStat(row[0], JobState(row[1]), int(row[2]), row[3], row[4]) for row in rows]
