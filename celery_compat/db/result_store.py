"""Celery's result store in SQL: task and group meta by key, counters, chord parts, LISTEN.

Why it exists: the Celery result backend (``backend.py``) is key/value shaped; this module is the
only code that runs its statements (``sql/celery.sql``), each on the connection it is given.

What it is not: the backend itself (which decides what to write) or the result listener.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from celery_compat.db import q, row_access

Conn = psycopg.Connection[Any]
GROUP_PREFIX = "celery-taskset-meta-"  # Celery's key of a group's result (and a chord's size)


def result_get(conn: Conn, key: str, now: datetime | None = None) -> str | None:
    if not row_access.of(conn).reads_rows:  # a producer: by its key, through its function
        return result_mget(conn, [key], now).get(key)
    row = conn.execute(q("celery_result_get"), {"key": key, "now": now}).fetchone()
    return None if row is None else str(row[0])


def result_mget(conn: Conn, keys: Sequence[str], now: datetime | None = None) -> dict[str, str]:
    reads = row_access.of(conn).reads_rows
    statement = q("celery_result_mget") if reads else q("celery_result_get_by_key")
    rows = conn.execute(statement, {"keys": list(keys), "now": now}).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def result_set(
    conn: Conn,
    key: str,
    value: str,
    ttl_s: float | None,
    now: datetime | None = None,
    status: str | None = None,
) -> bool:
    """Store ``value`` under ``key``; ``status``: the state of a task result, whose write leaves
    a stored SUCCESS in place. False when it did (nothing written, nobody woken)."""
    params = {"key": key, "value": value, "ttl_s": ttl_s, "now": now, "status": status}
    statement = q("celery_result_set")
    if status is None and key.startswith(GROUP_PREFIX) and not row_access.of(conn).writes_rows:
        statement = q("celery_group_save")  # a producer's GroupResult.save, a chord's header
    return conn.execute(statement, params).fetchone() is not None


def result_delete(conn: Conn, key: str) -> None:
    conn.execute(q("celery_result_delete"), {"key": key})


def result_expire(conn: Conn, key: str, ttl_s: float, now: datetime | None = None) -> None:
    statement = q("celery_result_expire")
    if key.startswith(GROUP_PREFIX) and not row_access.of(conn).writes_rows:
        statement = q("celery_group_expire")  # a producer's chord keeps its header
    conn.execute(statement, {"key": key, "ttl_s": ttl_s, "now": now})


def counter_incr(conn: Conn, key: str) -> int:
    row = conn.execute(q("celery_counter_incr"), {"key": key}).fetchone()
    assert row is not None
    return int(row[0])


def chord_part_incr(
    conn: Conn, key: str, task_id: str, listed_key: str, group_index: int | None
) -> int | None:
    """Count ``task_id`` as one finished part of chord ``key``; ``None`` if it was counted before.
    A first count also appends ``[group_index, task_id]`` to the list ``listed_key`` if that list
    exists (a chord whose header was a generator keeps one)."""
    params = {
        "key": key,
        "task_id": task_id,
        "listed_key": listed_key,
        "group_index": group_index,
    }
    row = conn.execute(q("celery_chord_part_incr"), params).fetchone()
    return None if row is None else int(row[0])


def chord_add(
    conn: Conn,
    key: str,
    task_id: str,
    group_index: int | None,
    ttl_s: float | None,
    now: datetime | None = None,
) -> int | None:
    """Append ``[group_index, task_id]`` to the added-parts list ``key`` of a running chord, in one
    statement; the list's new length, or ``None`` if ``task_id`` was added before."""
    params = {
        "key": key,
        "task_id": task_id,
        "group_index": group_index,
        "ttl_s": ttl_s,
        "now": now,
    }
    row = conn.execute(q("celery_chord_add"), params).fetchone()
    return None if row is None else int(row[0])


def listen_results(conn: Conn) -> None:
    conn.execute(q("listen_celery_results"))
