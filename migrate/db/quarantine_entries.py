"""Quarantine entries in SQL: insert one (or count a sighting), list, read, resolve, re-reason.

Why it exists: ``x_migrate_quarantine`` is the drain's own table; this module is the only code
that runs its statements (``sql/migrate.sql``), each on the connection it is given (the drain's
batch transaction, or the operator's). Values travel as small frozen records.

What it is not: the policy of what is poison or how an entry is retried (``quarantine.py``,
``batch.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from migrate.db import q

Conn = psycopg.Connection[Any]


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


@dataclass(frozen=True, slots=True)
class Stored:
    entry: Entry
    raw: bytes
    meta: dict[str, Any] | None
    sha256: str


@dataclass(frozen=True, slots=True)
class NewEntry:
    """One poison message as it is stored: its bytes, where it came from, and why."""

    broker: str
    queue: str
    reason: str
    detail: str
    task: str | None
    task_id: str | None
    format: str
    raw: bytes
    meta: Any  # JSON-safe already
    sha256: str

    def params(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "queue": self.queue,
            "reason": self.reason,
            "detail": self.detail,
            "task": self.task,
            "task_id": self.task_id,
            "format": self.format,
            "raw": self.raw,
            "meta": Jsonb(self.meta) if self.meta is not None else None,
            "sha256": self.sha256,
            "size": len(self.raw),
        }


@dataclass(frozen=True, slots=True)
class EntryFilter:
    include_resolved: bool = False
    reason: str | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class Resolution:
    """An open entry closed as ``retried`` (with the job it became) or ``discarded``."""

    entry_id: int
    resolution: str
    job_id: UUID | None = None


@dataclass(frozen=True, slots=True)
class Reason:
    """A new reason for an open entry (a retry that failed again, differently)."""

    entry_id: int
    reason: str
    detail: str


_ENTRY_FIELDS = tuple(Entry.__dataclass_fields__)


def _entry(row: dict[str, Any]) -> Entry:
    return Entry(**{k: row[k] for k in _ENTRY_FIELDS})


def insert(conn: Conn, new: NewEntry) -> bool:
    """False when these bytes were already quarantined (their sighting count went up)."""
    row = conn.execute(q("migrate_quarantine_put"), new.params()).fetchone()
    assert row is not None
    return bool(row[1])


def listed(conn: Conn, which: EntryFilter) -> list[Entry]:
    params = {"all": which.include_resolved, "reason": which.reason, "limit": which.limit}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(q("migrate_quarantine_list"), params).fetchall()
    return [_entry(r) for r in rows]


def get(conn: Conn, entry_id: int) -> Stored | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(q("migrate_quarantine_get"), {"id": entry_id}).fetchone()
    if row is None:
        return None
    return Stored(_entry(row), bytes(row["raw"]), row["meta"], str(row["sha256"]))


def resolve(conn: Conn, resolution: Resolution) -> bool:
    """False if the entry was not open."""
    params = {
        "id": resolution.entry_id,
        "resolution": resolution.resolution,
        "job_id": resolution.job_id,
    }
    return conn.execute(q("migrate_quarantine_resolve"), params).fetchone() is not None


def set_reason(conn: Conn, reason: Reason) -> None:
    params = {"id": reason.entry_id, "reason": reason.reason, "detail": reason.detail}
    conn.execute(q("migrate_quarantine_reason"), params)


def open_counts(conn: Conn) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in conn.execute(q("migrate_quarantine_counts")).fetchall()}


def known_result_keys(conn: Conn, keys: Sequence[str]) -> list[str]:
    """The keys among ``keys`` that the bridge's result store holds."""
    rows = conn.execute(q("migrate_chord_groups_known"), {"keys": list(keys)}).fetchall()
    return [str(r[0]) for r in rows]
