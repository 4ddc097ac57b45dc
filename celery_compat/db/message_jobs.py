"""Celery messages as job rows: the insert (single and batch, keyed or not), the rows of a
task id, the purge of ready messages, and the task ids whose rows were cancelled lately.

Why it exists: a Celery message becomes a job through the engine's insert (``x_jobs_insert``,
migration 0008 and its successors) or, one message at a time, through ``celery_enqueue``, the
same insert as one plain statement (a one-by-one ``.delay()`` pays a round trip and a durable
commit, and the function call is work it need not pay); ``tests/test_insert_path.py`` holds the
two to the same columns and values, including a message born cancelled because its task id was
revoked. A message sent under a ``SendKey``
(``send_keys.py`` decides which are) first takes its key in the ledger (``x_celery_tasks``): a
key already there absorbs the message. A message with no key is always a new job and writes no
ledger row. Each function takes the connection to use, so an enqueue can join a caller's
transaction.

What it is not: the sender (``sending.py`` decides what to write, under which key, on which
connection).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from celery_compat.db import q, row_access
from celery_compat.sending.message_row import CeleryMessage
from celery_compat.sending.send_keys import NO_SENDER, SendKey
from ujobs_bridge.ext.database import DirectStatement, array_column, register_arrays

Conn = psycopg.Connection[Any]

# last_error of a message born cancelled because its task id was revoked before it was sent.
REVOKED_REASON = "UJ_JOB_CANCELLED: task id was revoked"


def enqueue(
    conn: Conn | psycopg.Cursor[Any],
    message: CeleryMessage,
    *,
    max_attempts: int,
    now: datetime | None = None,
    input_json: str | None = None,
    key: SendKey | None = None,
    commit_level: str | None = None,
) -> UUID | None:
    """Insert one message as a job; ``None`` when ``key`` was taken before (the ledger absorbed
    a duplicate). ``conn``: a connection, or a cursor to reuse (the one-by-one send's).
    ``input_json``: the message's ``input_json()`` when the caller already encoded it.
    ``commit_level``: the ``synchronous_commit`` of the statement's own transaction (an
    autocommit send through the pool; None: set nothing, always on a caller's transaction)."""
    params = message.params(max_attempts, now, input_json=input_json)
    params["revoked_reason"] = REVOKED_REASON
    params["send_commit"] = commit_level
    if key is None:
        statement = q("celery_enqueue") if row_access.of(conn).writes_rows else q("celery_send_one")
        try:
            row = conn.execute(statement, params).fetchone()
        except psycopg.errors.InsufficientPrivilege:
            row_access.forget(conn)
            raise
    else:
        params.update(
            key_task_id=key.task_id,
            key_retries=key.retries,
            key_nesting=key.nesting,
            sent_by=key.sent_by,
            ordinal=key.ordinal,
        )
        row = conn.execute(q("celery_enqueue_keyed"), params).fetchone()
    return None if row is None else row[0]


_ENQUEUE_DIRECT = DirectStatement("ujobs_celery_enqueue", q("celery_enqueue"))


def enqueue_direct(
    conn: Conn,
    message: CeleryMessage,
    *,
    max_attempts: int,
    now: datetime | None = None,
    input_json: str | None = None,
    commit_level: str | None = None,
) -> UUID | None:
    """``enqueue`` of a message with no send key, on an autocommit connection at rest that the
    caller holds alone (``DirectStatement.usable``): the same statement, run through libpq
    directly (``ujobs_bridge._internal.db.direct``): a one-by-one ``.delay()``."""
    params = message.params(max_attempts, now, input_json=input_json)
    params["revoked_reason"] = REVOKED_REASON
    params["send_commit"] = commit_level
    if not row_access.of(conn).writes_rows:  # a producer: through its function
        return enqueue(
            conn,
            message,
            max_attempts=max_attempts,
            now=now,
            input_json=input_json,
            commit_level=commit_level,
        )
    try:
        found = _ENQUEUE_DIRECT.first_value(conn, params)
    except psycopg.errors.InsufficientPrivilege:
        row_access.forget(conn)
        raise
    return found if isinstance(found, UUID) else None


def set_send_commit(conn: Conn, level: str) -> None:
    """``synchronous_commit`` for the rest of ``conn``'s open transaction, one the sender owns
    (a group's sends through the pool): the app's ``ujobs_send_commit``."""
    conn.execute(q("celery_send_commit_set"), {"level": level})


def enqueue_many(
    conn: Conn,
    messages: Sequence[CeleryMessage],
    *,
    max_attempts: int,
    now: datetime | None = None,
    inputs: Sequence[str] | None = None,
    keys: Sequence[SendKey | None] | None = None,
) -> list[UUID]:
    """Insert many messages in one statement, message i under ``keys[i]`` (None: no key; no
    ``keys``: none has one); messages whose key was taken are skipped. Returns the new job ids."""
    sent = list(keys) if keys is not None else [None] * len(messages)
    columns: dict[str, tuple[str, list[Any]]] = {
        "task_ids": ("text", [m.task_id for m in messages]),
        "keyeds": ("bool", [k is not None for k in sent]),
        "key_task_ids": (
            "text",
            [m.task_id if k is None else k.task_id for m, k in zip(messages, sent, strict=True)],
        ),
        "retries": ("int4", [0 if k is None else k.retries for k in sent]),
        "nestings": ("int4", [0 if k is None else k.nesting for k in sent]),
        "sent_bys": ("uuid", [NO_SENDER if k is None else k.sent_by for k in sent]),
        "ordinals": ("int4", [0 if k is None else k.ordinal for k in sent]),
        "ids": ("uuid", [m.job_id for m in messages]),
        "names": ("text", [m.task for m in messages]),
        "queues": ("text", [m.queue for m in messages]),
        "inputs": (
            "text",
            list(inputs) if inputs is not None else [m.input_json() for m in messages],
        ),
        "priorities": ("int2", [m.priority for m in messages]),
        "run_ats": ("timestamptz", [m.eta for m in messages]),
        "traceparents": ("text", [m.headers.get("traceparent") or None for m in messages]),
    }
    # The arrays as the engine's batch insert sends them (a shared value once, text and uuid
    # columns joined); ``[]`` for an empty batch, which unnests to no row.
    params: dict[str, Any] = {
        name: array_column(kind, tuple(values)) if values else values
        for name, (kind, values) in columns.items()
    }
    params.update(
        max_attempts=max_attempts,
        revoked_reason=REVOKED_REASON,
        enqueued_by="celery_compat",
        now=now,
    )
    register_arrays(conn)
    statement = q("celery_enqueue_many")
    if not row_access.of(conn).writes_rows and all(k is None for k in sent):
        statement = q("celery_send_many")  # a producer's sends: through its function
    try:
        return [r[0] for r in conn.execute(statement, params).fetchall()]
    except psycopg.errors.InsufficientPrivilege:
        row_access.forget(conn)
        raise


def jobs_of_task(
    conn: Conn, task_id: str, *, include_done: bool = False
) -> list[tuple[UUID, str, str | None, datetime]]:
    """The job rows of a Celery task id that are not done (waiting, running, dead, cancelled),
    newest first; ``include_done``: every row (an operator's look-up by task id). An id no row
    can hold (NUL, a lone surrogate) has none."""
    if "\x00" in task_id or not _encodes(task_id):
        return []
    params = {"task_id": task_id, "include_done": include_done}
    reads = row_access.of(conn).reads_rows
    statement = q("celery_jobs_of_task") if reads else q("celery_jobs_of_task_by_id")
    rows = conn.execute(statement, params).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def task_ids_sent_here(conn: Conn, task_ids: Sequence[str]) -> set[str]:
    """Those of ``task_ids`` that have a job row in any state: they went through Postgres."""
    if not task_ids:
        return set()
    reads = row_access.of(conn).reads_rows
    statement = q("celery_task_ids_sent_here") if reads else q("celery_task_ids_sent_here_by_id")
    rows = conn.execute(statement, {"task_ids": list(task_ids)}).fetchall()
    return {r[0] for r in rows}


PURGED_REASON = "UJ_JOB_CANCELLED: purged"


def purge_ready(conn: Conn, queues: Sequence[str]) -> dict[str, int]:
    """Cancel the ready messages of ``queues`` that carry no ``eta`` (Celery's purge: a Celery
    worker holds ETA messages unacked, out of the purge's reach); returns how many per queue."""
    rows = conn.execute(
        q("celery_purge_ready"), {"queues": list(queues), "error": PURGED_REASON}
    ).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def cancelled_recent(
    conn: Conn, window_s: float, limit: int, now: datetime | None = None
) -> list[tuple[str, float]]:
    """``(task id, age in seconds)`` of the Celery tasks whose rows were cancelled within
    ``window_s`` other than by a purge (an operator's cancel, a revoke, an expiry), the newest
    ``limit``, oldest first."""
    params = {"window_s": window_s, "limit": limit, "now": now, "purged": PURGED_REASON}
    rows = conn.execute(q("celery_cancelled_recent"), params).fetchall()
    return [(str(r[0]), float(r[1])) for r in rows]
