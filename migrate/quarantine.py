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
import math
from typing import Any
from uuid import UUID

import psycopg

from migrate.db import quarantine_entries as rows
from migrate.db.quarantine_entries import Entry, Stored
from migrate.decoding import Poison

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
    "storable_text",
    "update_reason",
]

Conn = psycopg.Connection[Any]
_VOLATILE = ("redelivered", "delivery_tag", "x-delivery-count")


MAX_META_DEPTH = 32
TOO_DEEP = "<nested too deep>"


def storable_text(text: str, limit: int | None = None) -> str:
    """``text`` as PostgreSQL can store it: a NUL shown as ``\\x00``, a lone surrogate as its
    ``\\udXXX`` escape; cut to ``limit`` characters."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if limit is None else text[:limit]


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as jsonb can hold it (for ``meta``): text that PostgreSQL can store, anything JSON
    cannot hold (bytes, datetimes, NaN) rendered as text, nesting cut at ``MAX_META_DEPTH``.
    Never raises: a poison message's metadata must not stop its own quarantine."""
    if depth > MAX_META_DEPTH:
        return TOO_DEEP
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_text(str(k)): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, depth + 1) for v in value]
    return storable_text(str(value))


def fingerprint(raw: bytes, meta: dict[str, Any] | None) -> str:
    """sha256 of the raw bytes and the stable part of ``meta`` (redelivery flags left out)."""
    digest = hashlib.sha256(raw)
    meta = json_safe(meta)
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
        broker=storable_text(broker),
        queue=storable_text(queue),
        reason=poison.reason,
        detail=storable_text(poison.detail, 2000),
        task=storable_text(poison.task, 2000) if poison.task is not None else None,
        task_id=storable_text(poison.task_id, 2000) if poison.task_id is not None else None,
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
    rows.set_reason(conn, rows.Reason(entry_id, poison.reason, storable_text(poison.detail, 2000)))


def open_counts(conn: Conn) -> dict[str, int]:
    return rows.open_counts(conn)


def known_chord_groups(conn: Conn, groups: set[str]) -> set[str]:
    """The chord group ids whose state (group meta) is in the bridge's result store."""
    prefix = "celery-taskset-meta-"
    known = rows.known_result_keys(conn, [prefix + g for g in groups])
    return {key[len(prefix) :] for key in known}
