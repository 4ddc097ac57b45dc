"""The statements over django-celery-beat's tables (``sql/django_beat.sql``) and the only code
that runs them, each on the connection it is given (the scheduler's round, or its fire's
transaction).

What it is not: the reading of a row into a periodic task (``celery_compat.beat.django_beat``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from celery_compat.db import q

Conn = psycopg.Connection[Any]


def changed_marker(conn: Conn) -> datetime | None:
    """``PeriodicTasks.last_update`` (None before django-celery-beat's first change)."""
    row = conn.execute(q("django_beat_changed")).fetchone()
    return row[0] if row is not None else None


def expire(conn: Conn, now: datetime) -> list[str]:
    """Disable the enabled rows past their ``expires``; their names."""
    return [r[0] for r in conn.execute(q("django_beat_expire"), {"now": now}).fetchall()]


def entries(conn: Conn) -> list[tuple[Any, ...]]:
    """Every enabled row with its schedule row's columns (``Row``'s field order)."""
    with conn.cursor() as cur:
        cur.execute(q("django_beat_entries"))
        return list(cur.fetchall())


def ran(conn: Conn, row_id: int, now: datetime | None) -> bool | None:
    """Count one send of row ``row_id``: its ``one_off`` flag, or None when it is no longer
    enabled (nothing may be sent)."""
    row = conn.execute(q("django_beat_ran"), {"id": row_id, "now": now}).fetchone()
    return bool(row[0]) if row is not None else None


def mark_changed(conn: Conn, now: datetime | None) -> None:
    """Move ``PeriodicTasks.last_update``: every scheduler re-reads the rows."""
    conn.execute(q("django_beat_mark_changed"), {"now": now})


def unfinished_job(conn: Conn, name: str) -> Any:
    """The id of a message row ``name`` sent that waits or runs, else None."""
    row = conn.execute(q("django_beat_unfinished"), {"name": name}).fetchone()
    return row[0] if row is not None else None
