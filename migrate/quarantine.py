"""The quarantine: broker messages that could not become jobs, kept byte for byte with a reason.

Why it exists: "quarantine, never drop". A poison message is written here in the SAME
transaction as the batch's good rows, then acknowledged on the broker, so the drain goes on and
nothing is lost. An operator lists, reads, retries (after deploying the missing task, or with
``--accept-content``/``--accept-pickle``) or discards entries. A retry decodes the stored bytes
again through exactly the drainer's path and inserts the row in the same transaction that marks
the entry ``retried``; rows are never deleted, so the record of what happened stays.

The same bytes quarantined twice (redelivered after a crash between commit and ack) are one
entry: ``(sha256, queue, broker)`` is unique and ``seen`` counts sightings.

What it is not: a dead-letter queue for jobs (``x_jobs`` state ``dead`` is that).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from .db import q
from .decoding import Poison

Conn = psycopg.Connection[Any]
_VOLATILE = ("redelivered", "delivery_tag", "x-delivery-count")


def json_safe(value: Any) -> Any:
    """``value`` with anything JSON cannot hold rendered as text (for ``meta``)."""
    return json.loads(json.dumps(value, default=str))


def fingerprint(raw: bytes, meta: dict[str, Any] | None) -> str:
    """sha256 of the raw bytes and the stable part of ``meta`` (redelivery flags left out)."""
    digest = hashlib.sha256(raw)
    if meta:
        stable = {k: v for k, v in meta.items() if k != "properties"}
        headers = {k: v for k, v in (stable.get("headers") or {}).items() if k not in _VOLATILE}
        stable["headers"] = headers
        digest.update(json.dumps(stable, sort_keys=True, default=str).encode())
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    created_at: datetime
    broker: str
    queue: str
    reason: str
    detail: str
    task: str | None
    task_id: str | None
    format: str
    size: int
    seen: int
    resolution: str | None
    resolved_at: datetime | None
    job_id: UUID | None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": self.created_at.isoformat(),
            "broker": self.broker,
            "queue": self.queue,
            "reason": self.reason,
            "detail": self.detail,
            "task": self.task,
            "task_id": self.task_id,
            "format": self.format,
            "size": self.size,
            "seen": self.seen,
            "resolution": self.resolution,
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
            "job_id": str(self.job_id) if self.job_id else None,
        }


_ENTRY_FIELDS = tuple(Entry.__dataclass_fields__)


def _entry(row: dict[str, Any]) -> Entry:
    return Entry(**{k: row[k] for k in _ENTRY_FIELDS})


def put(
    conn: Conn,
    *,
    broker: str,
    queue: str,
    fmt: str,
    raw: bytes,
    meta: dict[str, Any] | None,
    poison: Poison,
) -> bool:
    """Store one poison message; False when these bytes were already quarantined (seen += 1)."""
    row = conn.execute(
        q("migrate_quarantine_put"),
        {
            "broker": broker,
            "queue": queue,
            "reason": poison.reason,
            "detail": poison.detail[:2000],
            "task": poison.task,
            "task_id": poison.task_id,
            "format": fmt,
            "raw": raw,
            "meta": Jsonb(json_safe(meta)) if meta is not None else None,
            "sha256": fingerprint(raw, meta),
            "size": len(raw),
        },
    ).fetchone()
    assert row is not None
    return bool(row[1])


def entries(
    conn: Conn, *, include_resolved: bool = False, reason: str | None = None, limit: int = 100
) -> list[Entry]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            q("migrate_quarantine_list"),
            {"all": include_resolved, "reason": reason, "limit": limit},
        ).fetchall()
    return [_entry(r) for r in rows]


@dataclass(frozen=True, slots=True)
class Stored:
    entry: Entry
    raw: bytes
    meta: dict[str, Any] | None
    sha256: str


def get(conn: Conn, entry_id: int) -> Stored | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(q("migrate_quarantine_get"), {"id": entry_id}).fetchone()
    if row is None:
        return None
    return Stored(_entry(row), bytes(row["raw"]), row["meta"], str(row["sha256"]))


def resolve(conn: Conn, entry_id: int, resolution: str, job_id: UUID | None = None) -> bool:
    """Mark an open entry ``retried`` or ``discarded``; False if it was not open."""
    row = conn.execute(
        q("migrate_quarantine_resolve"),
        {"id": entry_id, "resolution": resolution, "job_id": job_id},
    ).fetchone()
    return row is not None


def update_reason(conn: Conn, entry_id: int, poison: Poison) -> None:
    conn.execute(
        q("migrate_quarantine_reason"),
        {"id": entry_id, "reason": poison.reason, "detail": poison.detail[:2000]},
    )


def open_counts(conn: Conn) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in conn.execute(q("migrate_quarantine_counts")).fetchall()}


def known_chord_groups(conn: Conn, groups: set[str]) -> set[str]:
    """The chord group ids whose state (group meta) is in the bridge's result store."""
    prefix = "celery-taskset-meta-"
    rows = conn.execute(
        q("migrate_chord_groups_known"), {"keys": [prefix + g for g in groups]}
    ).fetchall()
    return {str(r[0])[len(prefix) :] for r in rows}
