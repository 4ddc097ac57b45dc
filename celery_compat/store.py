"""celery_compat's database calls: Celery messages as jobs, results, chord counters, revokes.

Why it exists: the facade's Postgres access goes through this one module, so the statements it
runs are the named blocks of ``celery_compat/db/sql/celery.sql`` and
nothing else. Each function takes the connection to use, so an enqueue can join a caller's
transaction while results go through the pool.

What it is not: the Celery result backend (``backend.py``) or the sender (``sending.py``); those
decide *what* to write, this module only writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from .db import q
from .message_row import CeleryMessage

Conn = psycopg.Connection[Any]

# last_error of a message born cancelled because its task id was revoked before it was sent.
REVOKED_REASON = "UJ_JOB_CANCELLED: task id was revoked"


def enqueue(
    conn: Conn,
    message: CeleryMessage,
    *,
    max_attempts: int,
    now: datetime | None = None,
    input_json: str | None = None,
) -> UUID | None:
    """Insert one message as a job; ``None`` when this message (task id, retries, nesting) was
    already enqueued once (the ledger absorbed the duplicate). ``input_json``: the message's
    ``input_json()`` when the caller already encoded it."""
    params = message.params(max_attempts, now, input_json=input_json)
    params["revoked_reason"] = REVOKED_REASON
    row = conn.execute(q("celery_enqueue"), params).fetchone()
    return None if row is None else row[0]


def enqueue_many(
    conn: Conn,
    messages: Sequence[CeleryMessage],
    *,
    max_attempts: int,
    now: datetime | None = None,
    inputs: Sequence[str] | None = None,
) -> list[UUID]:
    """Insert many messages in one statement; duplicates are skipped. Returns the new job ids."""
    params: dict[str, Any] = {
        "task_ids": [m.task_id for m in messages],
        "retries": [m.retries for m in messages],
        "nestings": [m.nesting for m in messages],
        "ids": [m.job_id for m in messages],
        "names": [m.task for m in messages],
        "queues": [m.queue for m in messages],
        "inputs": list(inputs) if inputs is not None else [m.input_json() for m in messages],
        "priorities": [m.priority for m in messages],
        "run_ats": [m.eta for m in messages],
        "traceparents": [m.headers.get("traceparent") or None for m in messages],
        "max_attempts": max_attempts,
        "revoked_reason": REVOKED_REASON,
        "enqueued_by": "celery_compat",
        "now": now,
    }
    return [r[0] for r in conn.execute(q("celery_enqueue_many"), params).fetchall()]


def jobs_of_task(conn: Conn, task_id: str) -> list[tuple[UUID, str, str | None, datetime]]:
    """The job rows of a Celery task id, newest message (highest retries) first."""
    rows = conn.execute(q("celery_jobs_of_task"), {"task_id": task_id}).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


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


def result_get(conn: Conn, key: str, now: datetime | None = None) -> str | None:
    row = conn.execute(q("celery_result_get"), {"key": key, "now": now}).fetchone()
    return None if row is None else str(row[0])


def result_mget(conn: Conn, keys: Sequence[str], now: datetime | None = None) -> dict[str, str]:
    rows = conn.execute(q("celery_result_mget"), {"keys": list(keys), "now": now}).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def result_set(
    conn: Conn, key: str, value: str, ttl_s: float | None, now: datetime | None = None
) -> None:
    conn.execute(q("celery_result_set"), {"key": key, "value": value, "ttl_s": ttl_s, "now": now})


def result_delete(conn: Conn, key: str) -> None:
    conn.execute(q("celery_result_delete"), {"key": key})


def result_expire(conn: Conn, key: str, ttl_s: float, now: datetime | None = None) -> None:
    conn.execute(q("celery_result_expire"), {"key": key, "ttl_s": ttl_s, "now": now})


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
