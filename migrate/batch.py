"""One batch of broker messages → job rows and quarantine entries, in ONE transaction.

Why it exists: the drainers (Redis, RabbitMQ, any kombu transport) differ only in how they take
a message and how they let go of it; what happens in between is the same and lives here:
decode every message (``decoding`` → ``protocol``), insert the good ones exactly as
celery_compat's sender does (``celery_compat.db.message_jobs.enqueue_many``: one row per (task id,
retries, replaced_task_nesting), for good, through the ``x_celery_tasks`` ledger), quarantine
the rest with their raw bytes, and COMMIT (``prepare`` then ``commit_prepared``: decoding needs
no database, so the loop decodes one batch while the previous one commits). Only after the
commit returns may a drainer remove or ack the batch on the broker; a crash in between replays the batch and the ledger (and the
quarantine's fingerprint) absorbs the replay; a message under an existing key but with other
arguments is quarantined (``duplicate_conflict``), not silently absorbed. ``retry_entry`` runs a quarantined message
through the same path again.

What it is not: a transport (``redis_drain``/``amqp_drain``/``kombu_drain``) or the loop
(``runner.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg

from celery_compat.db import message_jobs
from celery_compat.sending.message_row import CeleryMessage
from celery_compat.sending.send_keys import identity_key
from migrate import quarantine
from migrate.appinfo import AppInfo
from migrate.db import ledger
from migrate.decoding import (
    CHORD_UNRECOVERABLE,
    DB_REJECTED,
    DUPLICATE_CONFLICT,
    MALFORMED,
    Accept,
    Envelope,
    Poison,
    deserialize,
    redis_envelope,
)
from migrate.protocol import Decoded, to_message
from ujobs_bridge.ext.database import connection_state
from ujobs_bridge.ext.jobs import new_job_ids

Conn = psycopg.Connection[Any]

# What became of one message (the report counts these).
MOVED = "moved"
EXPIRED = "expired"  # moved, but already expired: the worker records REVOKED and never runs it
DUPLICATE = "duplicate"  # the ledger already held this (task id, retries, nesting)
QUARANTINED = "quarantined"
QUARANTINE_SEEN = "quarantine_seen"  # these bytes were quarantined before


@dataclass(slots=True)
class Taken:
    """A message a drainer holds: its raw bytes, where it came from, how to let it go."""

    raw: bytes  # exactly what the broker gave: what quarantine keeps
    fmt: str  # 'redis' | 'amqp' | 'kombu'
    queue: str  # the queue whose row this becomes
    envelope: Envelope | None = None  # amqp/kombu: given; redis: parsed from raw
    meta: dict[str, Any] | None = None  # amqp/kombu: content type, encoding, headers, properties
    token: Any = None  # the drainer's handle: ("batch", list key), list key, tag, message
    problem: str | None = None  # the transport could not read it whole (quarantined: malformed)


@dataclass(slots=True)  # not frozen: made once per message, never changed
class Result:
    taken: Taken
    outcome: str
    task: str | None = None
    reason: str | None = None
    eta: datetime | None = None
    redelivered: bool = False


@dataclass(slots=True)
class Context:
    app: AppInfo
    accept: Accept
    broker: str  # the broker URL, password masked: recorded with quarantine entries
    kind: str  # 'redis' | 'amqp' | 'kombu'
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


def envelope_of(fmt: str, raw: bytes, meta: dict[str, Any] | None, max_bytes: int) -> Envelope:
    """Rebuild the envelope of a stored message (for a quarantine retry)."""
    if fmt == "redis":
        return redis_envelope(raw, max_bytes)
    meta = meta or {}
    headers, properties = dict(meta.get("headers") or {}), dict(meta.get("properties") or {})
    try:  # the whole message for --max-bytes: the body and its headers and properties
        size: int | None = len(raw) + len(json.dumps([headers, properties], default=str))
    except (TypeError, ValueError, RecursionError):
        size = None
    return Envelope(
        raw,
        str(meta.get("content_type") or "application/data"),
        str(meta.get("content_encoding") or "utf-8"),
        headers,
        properties,
        size,
    )


def decode(
    taken: Taken, ctx: Context, now: datetime | None = None, job_id: UUID | None = None
) -> Decoded:
    """The row for one taken message, or :class:`Poison`. ``now``: the batch's clock reading
    (expiry is judged against it), read from ``ctx`` when not given; ``job_id``: the row's id
    (drawn when not given)."""
    if taken.problem is not None:
        raise Poison(MALFORMED, taken.problem)
    envelope = taken.envelope
    if envelope is None:
        envelope = envelope_of(taken.fmt, taken.raw, taken.meta, ctx.accept.max_bytes)
    payload = deserialize(envelope, ctx.accept)
    return to_message(
        envelope,
        payload,
        queue=taken.queue,
        broker=ctx.kind,
        app=ctx.app,
        now=ctx.now() if now is None else now,
        job_id=job_id,
    )


def _chord_group(decoded: Decoded) -> str | None:
    if decoded.chord_group:
        return decoded.chord_group
    message = decoded.message
    if message.task == "celery.chord_unlock":  # polls a chord's parts in the old result store
        value = message.kwargs.get("group_id") or (message.args[0] if message.args else None)
        return str(value) if value else None
    return None


def _poison_of(decoded: Decoded, group: str) -> Poison:
    return Poison(
        CHORD_UNRECOVERABLE,
        f"chord {group}: its state (group meta, part counter) is not in the bridge's result store",
        task=decoded.message.task,
        task_id=decoded.message.task_id,
    )


@dataclass(slots=True)
class Prepared:
    """A batch decoded (no database yet): what will be inserted, what quarantined."""

    items: list[Taken]
    good: list[tuple[Taken, Decoded]]
    bad: list[tuple[Taken, Poison]]


def prepare(items: list[Taken], ctx: Context) -> Prepared:
    """Decode a batch: pure CPU, so a drainer may do it while the previous batch commits."""
    good: list[tuple[Taken, Decoded]] = []
    bad: list[tuple[Taken, Poison]] = []
    now = ctx.now()  # one clock reading and one draw of row ids per batch
    for taken, job_id in zip(items, new_job_ids(len(items)), strict=True):
        try:
            good.append((taken, decode(taken, ctx, now, job_id)))
        except Exception as exc:  # decoding is pure: whatever it raises, this message caused
            bad.append((taken, as_poison(exc)))
    return Prepared(items, good, bad)


def as_poison(exc: Exception) -> Poison:
    """Any error decoding one message, as that message's quarantine reason."""
    if isinstance(exc, Poison):
        return exc
    if isinstance(exc, RecursionError):
        return Poison(MALFORMED, "the message nests deeper than Python can read")
    return Poison(MALFORMED, f"the message cannot be read: {type(exc).__name__}: {str(exc)[:300]}")


def commit_prepared(conn: Conn, batch: Prepared, ctx: Context) -> list[Result]:
    """Insert and quarantine a decoded batch in one transaction; returns each one's outcome."""
    good, bad = list(batch.good), list(batch.bad)
    results: list[Result] = []
    with conn.transaction():
        groups = {g for _, d in good if (g := _chord_group(d))}
        if groups:
            known = quarantine.known_chord_groups(conn, groups)
            keep: list[tuple[Taken, Decoded]] = []
            for taken, decoded in good:
                group = _chord_group(decoded)
                if group is not None and group not in known:
                    bad.append((taken, _poison_of(decoded, group)))
                else:
                    keep.append((taken, decoded))
            good = keep
        if good:
            results.extend(_insert_isolating(conn, good, bad, ctx))
        for taken, poisoned in bad:
            fresh = _quarantine(conn, taken, poisoned, ctx)
            results.append(
                Result(
                    taken, QUARANTINED if fresh else QUARANTINE_SEEN, poisoned.task, poisoned.reason
                )
            )
    return results


# Errors one message's values cause in the INSERT (the database's own rejection, or psycopg's
# refusal to send a value): the batch is split until the message is found. Anything else (a
# lost connection, an admin shutdown) is the infrastructure's, and stops the drain.
REJECTIONS: tuple[type[Exception], ...] = (
    psycopg.DataError,  # 22xxx: NUL, bad Unicode, out-of-range numbers, bad JSON; client-side NUL
    psycopg.IntegrityError,  # 23xxx: a constraint the row breaks
    psycopg.errors.ProgramLimitExceeded,  # 54xxx: index row too large, nesting too deep
    ValueError,  # psycopg could not encode a value (a lone surrogate: UnicodeEncodeError)
    OverflowError,
)


def rejected_by_database(conn: Conn, exc: BaseException) -> bool:
    """True when ``exc`` is a refusal of the data and ``conn`` is still usable (never an error of
    the connection: ``connection_state``)."""
    return (
        isinstance(exc, REJECTIONS)
        and not connection_state(exc)
        and not conn.broken
        and not conn.closed
    )


def _insert_isolating(
    conn: Conn, good: list[tuple[Taken, Decoded]], bad: list[tuple[Taken, Poison]], ctx: Context
) -> list[Result]:
    """Insert ``good`` under a savepoint; when the database refuses the data, roll back to it and
    insert each half the same way, until the refused message is alone: it goes to ``bad``
    (``db_rejected``, with the database's words). One bad message in n costs about 2·log2(n)
    extra statements; the usual batch, one savepoint."""
    conflicts: list[tuple[Taken, Poison]] = []
    try:
        with conn.transaction():
            results = _insert(conn, good, conflicts, ctx)
    except Exception as exc:
        if not rejected_by_database(conn, exc):
            raise
        if len(good) == 1:
            taken, decoded = good[0]
            bad.append((taken, _rejection(decoded, exc)))
            return []
        half = len(good) // 2
        return _insert_isolating(conn, good[:half], bad, ctx) + _insert_isolating(
            conn, good[half:], bad, ctx
        )
    bad.extend(conflicts)
    return results


def _rejection(decoded: Decoded, exc: Exception) -> Poison:
    text = str(exc).strip().replace("\n", " / ")
    return Poison(
        DB_REJECTED,
        f"the database refused the row: {type(exc).__name__}: {text[:500]}",
        task=decoded.message.task,
        task_id=decoded.message.task_id,
    )


def _quarantine(conn: Conn, taken: Taken, poisoned: Poison, ctx: Context) -> bool:
    """Store one poison message; if even its sanitized metadata is refused, store it again with
    the bytes and the reason alone (the bytes are ``bytea``: always storable)."""

    def put(meta: dict[str, Any] | None, poison: Poison) -> bool:
        with conn.transaction():
            return quarantine.put(
                conn,
                broker=ctx.broker,
                queue=taken.queue,
                fmt=taken.fmt,
                raw=taken.raw,
                meta=meta,
                poison=poison,
            )

    try:
        return put(taken.meta, poisoned)
    except Exception as exc:
        if not rejected_by_database(conn, exc):
            raise
        detail = f"{poisoned.detail} (its metadata could not be stored: {exc})"
        return put(None, Poison(poisoned.reason, detail, task=None, task_id=None))


def _insert(
    conn: Conn, good: list[tuple[Taken, Decoded]], bad: list[tuple[Taken, Poison]], ctx: Context
) -> list[Result]:
    """Insert through the ledger; a message the ledger already holds is a DUPLICATE when its
    arguments match the job's, and goes to ``bad`` (``duplicate_conflict``) when they do not."""
    messages = [d.message for _, d in good]
    inputs = [d.input for _, d in good]
    keys = [identity_key(m) for m in messages]  # a transport duplicate is the same message
    new = set(
        message_jobs.enqueue_many(
            conn, messages, max_attempts=ctx.app.max_attempts, inputs=inputs, keys=keys
        )
    )
    absorbed = [m for m in messages if m.job_id not in new]
    stored = ledger.stored_arguments(conn, [_key(m) for m in absorbed]) if absorbed else {}
    results: list[Result] = []
    for taken, decoded in good:
        m = decoded.message
        if m.job_id in new:
            outcome = EXPIRED if decoded.expired else MOVED
        else:
            existing = stored.get(_key(m))
            if existing is not None and existing != ledger.arguments_of(decoded.input):
                detail = (
                    f"task {m.task_id} (retries {m.retries}) is already a job with other arguments"
                )
                bad.append(
                    (taken, Poison(DUPLICATE_CONFLICT, detail, task=m.task, task_id=m.task_id))
                )
                continue
            outcome = DUPLICATE
        results.append(Result(taken, outcome, m.task, None, decoded.eta, decoded.redelivered))
    return results


def _key(message: CeleryMessage) -> ledger.LedgerKey:
    return ledger.LedgerKey(message.task_id, message.retries, message.nesting)


def classify(taken: Taken, ctx: Context) -> Result:
    """What a drain WOULD do with one message, with no write (``--dry-run``)."""
    try:
        decoded = decode(taken, ctx)
    except Exception as exc:
        poison = as_poison(exc)
        return Result(taken, QUARANTINED, poison.task, poison.reason)
    m = decoded.message
    return Result(
        taken, EXPIRED if decoded.expired else MOVED, m.task, None, decoded.eta, decoded.redelivered
    )


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    ok: bool
    job_id: UUID | None = None
    duplicate: bool = False
    poison: Poison | None = None


def retry_entry(conn: Conn, entry_id: int, ctx: Context) -> RetryOutcome | None:
    """Decode a quarantined message again and, if it now makes a row, insert it and mark the
    entry ``retried`` in one transaction. ``None``: no open entry with that id."""
    with conn.transaction():
        stored = quarantine.get(conn, entry_id)
        if stored is None or stored.entry.resolution is not None:
            return None
        taken = Taken(stored.raw, stored.entry.format, stored.entry.queue, meta=stored.meta)
        try:
            decoded = decode(taken, ctx)
            group = _chord_group(decoded)
            if group is not None and not quarantine.known_chord_groups(conn, {group}):
                raise _poison_of(decoded, group)
        except Exception as exc:
            poison = as_poison(exc)
            quarantine.update_reason(conn, entry_id, poison)
            return RetryOutcome(False, poison=poison)
        try:
            with conn.transaction():
                job_id = message_jobs.enqueue(
                    conn,
                    decoded.message,
                    max_attempts=ctx.app.max_attempts,
                    input_json=decoded.input,
                    key=identity_key(decoded.message),
                )
        except Exception as exc:
            if not rejected_by_database(conn, exc):
                raise
            poison = _rejection(decoded, exc)
            quarantine.update_reason(conn, entry_id, poison)
            return RetryOutcome(False, poison=poison)
        quarantine.resolve(conn, entry_id, "retried", job_id)
        return RetryOutcome(True, job_id, duplicate=job_id is None)
