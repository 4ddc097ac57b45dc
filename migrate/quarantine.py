"""The quarantine: broker messages that could not become jobs, kept byte for byte with a reason.

Why it exists: "quarantine, never drop". A poison message is written here in the SAME
transaction as the batch's good rows, then acknowledged on the broker, so the drain goes on and
nothing is lost. An operator lists, reads, retries (after deploying the missing task, or with
``--accept-content``/``--accept-pickle``) or discards entries. A retry decodes the stored bytes
again through exactly the drainer's path and inserts the row in the same transaction that marks
the entry ``retried``; rows are never deleted, so the record of what happened stays.

The same bytes quarantined twice (redelivered after a crash between commit and ack) are one
entry: ``(sha256, queue, broker)`` is unique and ``seen`` counts sightings.

Its statements run in ``db/quarantine_entries.py``; this module decides what is stored.

What it is not: a dead-letter queue for jobs (``x_jobs`` state ``dead`` is that).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from uuid import UUID

import psycopg

from .db import quarantine_entries as rows
from .db.quarantine_entries import Entry, Stored
from .decoding import Poison

__all__ = [
    "Entry",
    "Stored",
    "entries",
    "fingerprint",
    "get",
    "json_safe",
    "known_chord_groups",
    "open_counts",
    "put",
    "resolve",
    "update_reason",
]

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
    new = rows.NewEntry(
        broker=broker,
        queue=queue,
        reason=poison.reason,
        detail=_text(poison.detail[:2000]) or "",
        task=_text(poison.task),
        task_id=_text(poison.task_id),
        format=fmt,
        raw=raw,
        meta=json_safe(meta) if meta is not None else None,
        sha256=fingerprint(raw, meta),
    )
    return rows.insert(conn, new)


def _text(value: str | None) -> str | None:
    """``value`` as Postgres text can hold it: a NUL or a lone surrogate (a broker message can
    carry both in its task id) written as its escape; the raw bytes keep the original."""
    if value is None:
        return None
    return value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def entries(
    conn: Conn, *, include_resolved: bool = False, reason: str | None = None, limit: int = 100
) -> list[Entry]:
    return rows.listed(conn, rows.EntryFilter(include_resolved, reason, limit))


def get(conn: Conn, entry_id: int) -> Stored | None:
    return rows.get(conn, entry_id)


def resolve(conn: Conn, entry_id: int, resolution: str, job_id: UUID | None = None) -> bool:
    """Mark an open entry ``retried`` or ``discarded``; False if it was not open."""
    return rows.resolve(conn, rows.Resolution(entry_id, resolution, job_id))


def update_reason(conn: Conn, entry_id: int, poison: Poison) -> None:
    rows.set_reason(conn, rows.Reason(entry_id, poison.reason, poison.detail[:2000]))


def open_counts(conn: Conn) -> dict[str, int]:
    return rows.open_counts(conn)


def known_chord_groups(conn: Conn, groups: set[str]) -> set[str]:
    """The chord group ids whose state (group meta) is in the bridge's result store."""
    prefix = "celery-taskset-meta-"
    known = rows.known_result_keys(conn, [prefix + g for g in groups])
    return {key[len(prefix) :] for key in known}
