"""The transactional outbox's statements (``sql/outbox.sql``): stage, lock, claim, mark, publish.

Why it exists: the outbox's promise (a job exists if and only if the transaction that staged it
committed, published in commit order) rests on these statements: a claim that only sees rows
older than every running transaction of its database (one elsewhere on the server
never stalls it), one relay at a time per database, and a cross-database
publish that a replay after a crash absorbs. They run only here.

What it is not: the relay loop or its batching (``ujobs_bridge._internal.outbox``). Each function runs on
the connection it is given, inside whatever transaction the caller holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from ujobs_bridge._internal.db.enqueue import EnqueueSpec
from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class StagedRow:
    """One staged row as the relay claims it: its outbox id and the job it becomes."""

    outbox_id: int
    spec: EnqueueSpec


def outbox_stage(conn: Conn, spec: EnqueueSpec) -> int:
    """Stage ``spec`` in ``conn``'s transaction; returns the outbox row's id."""
    row = conn.execute(q("outbox_stage"), spec.params(None)).fetchone()
    assert row is not None
    return int(row[0])


def outbox_relay_lock(conn: Conn) -> bool:
    """Inside a transaction: become THE relay of this database until it ends (False: another
    relay is publishing)."""
    row = conn.execute(q("outbox_relay_lock")).fetchone()
    return bool(row and row[0])


def outbox_claim(conn: Conn, limit: int) -> list[StagedRow]:
    """Lock up to ``limit`` unpublished rows no running transaction can still precede, in id
    order."""
    rows = conn.execute(q("outbox_claim"), {"limit": limit}).fetchall()
    return [_staged(row) for row in rows]


def outbox_mark(conn: Conn, outbox_ids: Sequence[int]) -> None:
    """Mark rows published."""
    conn.execute(q("outbox_mark"), {"ids": list(outbox_ids)})


def outbox_publish(conn: Conn, spec: EnqueueSpec, now: datetime | None) -> bool:
    """Insert one staged row into ANOTHER database's ``x_jobs`` by the same statement as any
    enqueue there (``job_enqueue``, whose untargeted ``on conflict do nothing`` means a row
    published before a crash, same job id, is not inserted twice and a live job holding the key
    absorbs it); False when the job id (or a live job holding its key) is already there."""
    return conn.execute(q("job_enqueue"), spec.params(now)).fetchone() is not None


def _staged(row: tuple[Any, ...]) -> StagedRow:
    (
        outbox_id,
        job_id,
        name,
        queue,
        input_json,
        key,
        max_attempts,
        priority,
        run_at,
        delay_s,
        expires_at,
        expires_in_s,
        tenant_id,
        traceparent,
        enqueued_by,
    ) = row
    spec = EnqueueSpec(
        id=job_id,
        name=name,
        queue=queue,
        input_json=input_json,
        max_attempts=max_attempts,
        priority=priority,
        idempotency_key=key,
        run_at=run_at,
        delay_s=delay_s,
        expires_at=expires_at,
        expires_in_s=expires_in_s,
        tenant_id=tenant_id,
        traceparent=traceparent,
        enqueued_by=enqueued_by,
    )
    return StagedRow(int(outbox_id), spec)
