"""Jobs in SQL: each function runs one named statement from ``sql/jobs.sql`` or ``sql/session.sql``.

Why it exists: it is the only code that turns engine intents (enqueue, claim a batch, settle a
batch, renew leases, rescue) into SQL, so the worker and CLI never see psycopg rows and the SQL
can be read in one file. Every method takes the connection to run on, because the caller decides
the transaction: the caller's own (transactional enqueue), the worker's claim connection, or the
heartbeat's dedicated one.

What it is not: a pool or a lifecycle owner. ``client.py`` owns the pool; the worker owns its
connections.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from ..errors import JobStateError
from ..records import ClaimedJob, JobRecord, JobRef, JobState, QueueStat, Settlement
from . import arrays
from .sql import q

Conn = psycopg.Connection[Any]

# A job's attempts handed back uncounted because its body met a database outage: given back
# this many times, then counted like failures (migration 0015), so a body that itself causes
# the outage (crashing the server, getting its connection killed) ends dead instead of looping.
# One outage costs a job one hand-back at most, so only a job that meets twenty reaches it.
OUTAGE_HANDBACKS = 20


class EnqueueSpec(NamedTuple):
    """One row to insert. ``run_at`` wins over ``delay_s``; both absent means now.

    Immutable like the frozen dataclass it was, but built in a fraction of the time: one is
    built per job enqueued, so on ``enqueue_many``'s path its constructor was a measurable share
    of the cost per row."""

    id: UUID
    name: str
    queue: str
    input_json: str
    max_attempts: int
    priority: int = 0
    idempotency_key: str | None = None
    run_at: datetime | None = None
    delay_s: float = 0.0
    expires_at: datetime | None = None
    expires_in_s: float | None = None
    tenant_id: str | None = None
    traceparent: str | None = None
    enqueued_by: str | None = None

    def params(self, now: datetime | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "queue": self.queue,
            "input": self.input_json,
            "idempotency_key": self.idempotency_key,
            "max_attempts": self.max_attempts,
            "priority": self.priority,
            "run_at": self.run_at,
            "delay_s": self.delay_s,
            "expires_at": self.expires_at,
            "expires_in_s": self.expires_in_s,
            "tenant_id": self.tenant_id,
            "traceparent": self.traceparent,
            "enqueued_by": self.enqueued_by,
            "now": now,
        }


def _id_taken(spec: EnqueueSpec) -> JobStateError:
    """Nothing inserted and no key to explain it: a row with this job id exists already."""
    return JobStateError(
        f"a job with id {spec.id} exists already", hint="enqueue with a new job id"
    )


def job_enqueue(conn: Conn, spec: EnqueueSpec, now: datetime | None) -> JobRef:
    """Insert one row through the one insert (``x_jobs_insert``); a live job holding the key
    answers instead, as ``existing``."""
    row = conn.execute(q("job_enqueue"), spec.params(now)).fetchone()
    if row is not None:
        return JobRef(row[0], spec.name)
    if spec.idempotency_key is None:
        raise _id_taken(spec)
    existing = conn.execute(
        q("job_get_live_by_key"), {"idempotency_key": spec.idempotency_key}
    ).fetchone()
    if existing is None:  # the live holder finished between the two statements: try once more
        row = conn.execute(q("job_enqueue"), spec.params(now)).fetchone()
        if row is not None:
            return JobRef(row[0], spec.name)
        existing = conn.execute(
            q("job_get_live_by_key"), {"idempotency_key": spec.idempotency_key}
        ).fetchone()
        assert existing is not None
    return JobRef(existing[0], spec.name, existing=True)


async def job_enqueue_async(
    conn: psycopg.AsyncConnection[Any], spec: EnqueueSpec, now: datetime | None
) -> JobRef:
    """``job_enqueue`` on an async connection (the caller's transaction)."""
    cur = await conn.execute(q("job_enqueue"), spec.params(now))
    row = await cur.fetchone()
    if row is not None:
        return JobRef(row[0], spec.name)
    if spec.idempotency_key is None:
        raise _id_taken(spec)
    cur = await conn.execute(q("job_get_live_by_key"), {"idempotency_key": spec.idempotency_key})
    existing = await cur.fetchone()
    if existing is None:
        raise JobStateError(
            "the live job holding this idempotency key finished while enqueueing",
            hint="retry the enqueue",
        )
    return JobRef(existing[0], spec.name, existing=True)


def job_enqueue_many(
    conn: Conn, specs: Sequence[EnqueueSpec], now: datetime | None
) -> list[JobRef]:
    """One statement for the whole batch; keys already live answer with their existing job."""
    if not specs:
        return []
    columns = [
        arrays.column(kind, c) for kind, c in zip(_KINDS, zip(*specs, strict=True), strict=True)
    ]
    params: dict[str, Any] = dict(zip(_COLUMN_PARAMS, columns, strict=True))
    params["now"] = now
    arrays.register(conn)
    skipped = {row[0] for row in conn.execute(q("job_enqueue_many"), params).fetchall()}
    if not skipped:
        return [JobRef(s.id, s.name) for s in specs]
    refs: list[JobRef] = []
    for spec in specs:
        if spec.id not in skipped:
            refs.append(JobRef(spec.id, spec.name))
        elif spec.idempotency_key is None:
            raise _id_taken(spec)
        else:
            refs.append(job_enqueue(conn, spec, now))
    return refs


# The array parameter of ``job_enqueue_many`` each EnqueueSpec field goes to, and its element
# type (``arrays.column``), in field order.
_ARRAY_OF = {
    "id": ("ids", "uuid"), "name": ("names", "text"), "queue": ("queues", "text"),
    "input_json": ("inputs", "text"), "max_attempts": ("max_attempts", "int4"),
    "priority": ("priorities", "int2"), "idempotency_key": ("idempotency_keys", "text"),
    "run_at": ("run_ats", "timestamptz"), "delay_s": ("delays", "float8"),
    "expires_at": ("expires_ats", "timestamptz"), "expires_in_s": ("expires_ins", "float8"),
    "tenant_id": ("tenant_ids", "text"), "traceparent": ("traceparents", "text"),
    "enqueued_by": ("enqueued_bys", "text"),
}  # fmt: skip
_COLUMN_PARAMS = tuple(_ARRAY_OF[field][0] for field in EnqueueSpec._fields)
_KINDS = tuple(_ARRAY_OF[field][1] for field in EnqueueSpec._fields)


@dataclass(frozen=True, slots=True)
class ClaimParams:
    """One claim: up to ``limit`` due jobs of ``queue`` named in ``names``, each leased to
    ``worker`` under ``token`` for ``lease_s`` seconds of the database clock. ``now`` is the
    injected clock's instant (``None``: the database's)."""

    queue: str
    names: Sequence[str]
    limit: int
    token: UUID
    lease_s: float
    worker: str
    now: datetime | None = None

    def params(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "names": list(self.names),
            "limit": self.limit,
            "token": self.token,
            "lease_s": self.lease_s,
            "worker": self.worker,
            "now": self.now,
        }


@dataclass(frozen=True, slots=True)
class _Undecodable:
    reason: str


def _input_loads(data: str | bytes) -> Any:
    """A claimed row's input, or why it cannot be decoded: one bad row must not fail the batch
    it came in (a claim commits before its rows are read)."""
    try:
        return json.loads(data)
    except RecursionError:
        return _Undecodable("nested too deeply to decode (past Python's recursion limit)")
    except ValueError as exc:
        return _Undecodable(f"not valid JSON ({exc})")


def _claim_cursor(conn: Conn) -> psycopg.Cursor[Any]:
    cur = conn.cursor()
    set_json_loads(_input_loads, cur)
    return cur


def _claimed(row: Sequence[Any]) -> ClaimedJob:
    """A claim statement's row (``job_claim``'s RETURNING order) as a ``ClaimedJob``, by name:
    ``undecodable`` is not a column, so the row cannot be spread positionally."""
    ident, name, queue, data, attempt, max_attempts, token, expired, deliveries, tp, due = row
    claimed = ClaimedJob(
        id=ident,
        name=name,
        queue=queue,
        input=data,
        attempt=attempt,
        max_attempts=max_attempts,
        lease_token=token,
        expired=expired,
        deliveries=deliveries,
        traceparent=tp,
        due_at=due,
    )
    if isinstance(claimed.input, _Undecodable):
        return replace(claimed, input={}, undecodable=claimed.input.reason)
    return claimed


def job_claim(conn: Conn, claim: ClaimParams) -> list[ClaimedJob]:
    """Claim a batch. A row whose input cannot be decoded comes back with ``undecodable`` set
    (its input empty) instead of failing the batch."""
    rows = _claim_cursor(conn).execute(q("job_claim"), claim.params()).fetchall()
    return [_claimed(row) for row in rows]


def job_claim_async(conn: Conn, claim: ClaimParams) -> list[ClaimedJob]:
    """``job_claim`` in a transaction of its own whose commit does not wait for the WAL flush
    (``set local``), sent as one pipeline: the claim behind PgBouncer, where the claim
    connection's session setting (``claims_commit_async``) would leak to other clients."""
    with conn.pipeline(), conn.transaction():
        conn.execute(q("tx_claims_async"))
        claimed = conn.execute(q("job_claim"), claim.params())
    return [ClaimedJob(*row) for row in claimed.fetchall()]


def job_settle_then_claim(
    conn: Conn,
    settlements: Sequence[Settlement],
    claim: ClaimParams,
    *,
    durable: bool,
) -> tuple[set[UUID], list[ClaimedJob]]:
    """Write outcomes and claim the next batch in ONE transaction sent as ONE pipeline: a single
    round trip and a single commit per worker cycle."""
    with conn.pipeline(), conn.transaction():
        if durable:
            conn.execute(q("tx_outcomes_durable"))
        settled = conn.execute(q("job_settle"), _settle_params(settlements, claim.now))
        claimed = _claim_cursor(conn).execute(q("job_claim"), claim.params())
    matched = {row[0] for row in settled.fetchall()}
    return matched, [_claimed(row) for row in claimed.fetchall()]


def _settle_params(settlements: Sequence[Settlement], now: datetime | None) -> dict[str, Any]:
    batch = json.dumps(
        [
            {
                "id": str(s.id),
                "token": str(s.token),
                "state": s.state.value,
                "output": s.output_json,
                "delay_s": s.delay_s,
                "error": s.error,
                "uncount": s.uncount,
                "run_at": s.run_at.isoformat() if s.run_at is not None else None,
                "outage": 1 if s.outage else 0,
            }
            for s in settlements
        ]
    )
    return {"batch": batch, "now": now, "outage_cap": OUTAGE_HANDBACKS}


def job_settle(conn: Conn, settlements: Sequence[Settlement], now: datetime | None) -> set[UUID]:
    """Write a batch of attempt outcomes; returns the ids whose lease still matched (fencing)."""
    if not settlements:
        return set()
    rows = conn.execute(q("job_settle"), _settle_params(settlements, now)).fetchall()
    return {row[0] for row in rows}


def job_heartbeat(conn: Conn, leases: Sequence[tuple[UUID, UUID]], lease_s: float) -> set[UUID]:
    if not leases:
        return set()
    payload = json.dumps([{"id": str(i), "token": str(t)} for i, t in leases])
    rows = conn.execute(q("job_heartbeat"), {"leases": payload, "lease_s": lease_s}).fetchall()
    return {row[0] for row in rows}


def job_states(conn: Conn, ids: Sequence[UUID]) -> dict[UUID, tuple[JobState, UUID | None]]:
    rows = conn.execute(q("job_states"), {"ids": list(ids)}).fetchall()
    return {row[0]: (JobState(row[1]), row[2]) for row in rows}


def job_rescue(
    conn: Conn, *, limit: int, error: str, now: datetime | None
) -> list[tuple[UUID, JobState]]:
    rows = conn.execute(q("job_rescue"), {"limit": limit, "error": error, "now": now}).fetchall()
    return [(row[0], JobState(row[1])) for row in rows]


def job_expire(conn: Conn, *, limit: int, error: str, now: datetime | None) -> list[UUID]:
    rows = conn.execute(q("job_expire"), {"limit": limit, "error": error, "now": now}).fetchall()
    return [row[0] for row in rows]


def job_cancel(conn: Conn, job_id: UUID, error: str) -> bool:
    return conn.execute(q("job_cancel"), {"id": job_id, "error": error}).fetchone() is not None


def job_requeue(conn: Conn, job_id: UUID, now: datetime | None) -> bool:
    return conn.execute(q("job_requeue"), {"id": job_id, "now": now}).fetchone() is not None


def _record(row: dict[str, Any]) -> JobRecord:
    row["state"] = JobState(row["state"])
    return JobRecord(**row)


def job_get(conn: Conn, job_id: UUID) -> JobRecord | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(q("job_get"), {"id": job_id}).fetchone()
    return None if row is None else _record(row)


def like_literal(text: str) -> str:
    """``text`` as a LIKE pattern matching exactly itself (``\\``, ``%`` and ``_`` escaped)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def job_list(
    conn: Conn,
    *,
    state: str | None,
    queue: str | None,
    name: str | None,
    limit: int,
    name_like: str | None = None,
    ids: Sequence[UUID] | None = None,
    offset: int = 0,
    since: datetime | None = None,
    until: datetime | None = None,
    before: tuple[datetime, UUID] | None = None,
) -> list[JobRecord]:
    """Newest first. ``name`` matches exactly, ``name_like`` is a LIKE pattern (``name`` wins);
    ``ids`` narrows to those rows; ``since``/``until`` bound ``created_at`` (until excluded);
    paged by ``limit`` and by key: ``before`` is the (created_at, id) of the last row of the
    previous page (read from the creation-order index, however deep), ``offset`` skips rows."""
    params = {
        "before_at": before[0] if before is not None else None,
        "before_id": before[1] if before is not None else None,
        "state": state,
        "queue": queue,
        "name_like": like_literal(name) if name is not None else name_like,
        "ids": list(ids) if ids is not None else None,
        "limit": limit,
        "offset": offset,
        "since": since,
        "until": until,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(q("job_list"), params).fetchall()
    return [_record(r) for r in rows]


def job_dead(
    conn: Conn,
    *,
    limit: int,
    queue: str | None = None,
    name_like: str | None = None,
    offset: int = 0,
) -> list[JobRecord]:
    """Dead letters, most recently dead first; filtered by queue and a LIKE pattern, paged."""
    params = {"limit": limit, "queue": queue, "name_like": name_like, "offset": offset}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(q("job_dead"), params).fetchall()
    return [_record(r) for r in rows]


def job_stats(conn: Conn) -> list[QueueStat]:
    rows = conn.execute(q("job_stats")).fetchall()
    return [QueueStat(row[0], JobState(row[1]), int(row[2]), row[3]) for row in rows]


@dataclass(frozen=True, slots=True)
class NameBacklog:
    """Due, unclaimed jobs of one name on one queue (and state, where a read groups by it):
    how many, since when, and for how long the oldest has been due, in seconds."""

    queue: str
    name: str
    jobs: int
    oldest_run_at: datetime
    oldest_s: float
    state: JobState = JobState.READY


@dataclass(frozen=True, slots=True)
class UnregisteredParams:
    """Due jobs on ``queues`` whose name is not in ``names``, due for at least ``after_s``
    seconds; only the first ``scan`` rows of each queue in claim order are read. ``now`` is the
    injected clock's instant (``None``: the database's)."""

    queues: Sequence[str]
    names: Sequence[str]
    after_s: float
    scan: int
    now: datetime | None = None

    def params(self) -> dict[str, Any]:
        return {
            "queues": list(self.queues),
            "names": list(self.names),
            "after_s": self.after_s,
            "scan": self.scan,
            "now": self.now,
        }


def job_unregistered(conn: Conn, find: UnregisteredParams) -> list[NameBacklog]:
    rows = conn.execute(q("job_unregistered"), find.params()).fetchall()
    return [NameBacklog(r[0], r[1], int(r[2]), r[3], float(r[4])) for r in rows]


@dataclass(frozen=True, slots=True)
class DeadUnregisteredParams:
    """Dead-letter up to ``limit`` jobs of ``queue`` whose name is not in ``names`` and that
    have been due for at least ``after_s`` seconds; ``error`` is the last error, ``{name}`` in it
    replaced by the job's name."""

    queue: str
    names: Sequence[str]
    after_s: float
    limit: int
    error: str
    now: datetime | None = None

    def params(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "names": list(self.names),
            "after_s": self.after_s,
            "limit": self.limit,
            "error": self.error,
            "now": self.now,
        }


def job_dead_unregistered(conn: Conn, dead: DeadUnregisteredParams) -> list[tuple[UUID, str]]:
    rows = conn.execute(q("job_dead_unregistered"), dead.params()).fetchall()
    return [(row[0], row[1]) for row in rows]


def job_stranded(conn: Conn, *, after_s: float, now: datetime | None) -> list[NameBacklog]:
    """Claimable jobs due for at least ``after_s`` seconds and not claimed, per queue, state
    and name (every queue: this read knows nothing of any worker's registry)."""
    rows = conn.execute(q("job_stranded"), {"after_s": after_s, "now": now}).fetchall()
    return [
        NameBacklog(r[0], r[2], int(r[3]), r[4], float(r[5]), state=JobState(r[1])) for r in rows
    ]
