"""Leases in SQL (``sql/jobs.sql``): claim a batch, settle it, renew its leases, rescue lapsed ones.

Why it exists: a job's attempt runs under a lease (a token and a deadline on the database clock)
that one statement grants and every later write is fenced by: the claim grants it, the heartbeat
renews it (and reads the state of a job whose lease it lost), the settle writes an outcome only
where the token still matches, and the rescue takes back jobs whose lease ran out; the claim
loop's other sweep, cancelling jobs past their expiry that never ran, is here too. Every function
takes the connection to run on, because the caller decides the transaction: the worker's claim
connection (settle and claim in one round trip) or the heartbeat's dedicated one.

What it is not: the claim loop or the heartbeat (``worker/claims.py``, ``worker/heartbeat.py``),
which decide when and how much, or a pool or a lifecycle owner (the worker owns its connections).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import set_json_loads

from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.records import ClaimedJob, JobState, Settlement

Conn = psycopg.Connection[Any]

# A job's attempts handed back uncounted because its body met a database outage: given back
# this many times, then counted like failures (migration 0015), so a body that itself causes
# the outage (crashing the server, getting its connection killed) ends dead instead of looping.
# One outage costs a job one hand-back at most, so only a job that meets twenty reaches it.
OUTAGE_HANDBACKS = 20


@dataclass(frozen=True, slots=True)
class ClaimParams:
    """One claim: up to ``limit`` due jobs of ``queue`` named in ``names``, each leased to
    ``worker`` under ``token`` for ``lease_s`` seconds of the database clock. ``now`` is the
    injected clock's instant (``None``: the database's). The first ``start`` rows in claim order
    (``None``: all of them) are recorded as started (the worker hands them to free body slots
    at once) and come back with ``started`` set; the others wait for ``job_start``."""

    queue: str
    names: Sequence[str]
    limit: int
    token: UUID
    lease_s: float
    worker: str
    now: datetime | None = None
    start: int | None = None

    def params(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "names": list(self.names),
            "limit": self.limit,
            "token": self.token,
            "lease_s": self.lease_s,
            "worker": self.worker,
            "now": self.now,
            "start": self.limit if self.start is None else self.start,
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
    ident, name, queue, data, attempt, max_attempts, token, expired, deliveries, tp, due, go = row
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
        started=bool(go),
    )
    if isinstance(claimed.input, _Undecodable):
        return replace(claimed, input={}, undecodable=claimed.input.reason)
    return claimed


def handed_job(payload: str) -> ClaimedJob | None:
    """A hand-off's notification (migration 0027) as the claimed row it is: a JSON header, a
    newline, then the job's input as the sender wrote it. None: not a hand-off this version
    reads (the worker then asks for its unknown hand-offs: ``job_handed_unknown``). An input
    that cannot be decoded comes back ``undecodable``, as a claimed row's does."""
    head, sep, data = payload.partition("\n")
    if not sep:
        return None
    try:
        header = json.loads(head)
        claimed = ClaimedJob(
            id=UUID(header["id"]),
            name=str(header["name"]),
            queue=str(header["queue"]),
            input=_input_loads(data),
            attempt=1,
            max_attempts=int(header["max_attempts"]),
            lease_token=UUID(header["token"]),
            expired=bool(header["expired"]),
            deliveries=1,
            traceparent=header["traceparent"],
            due_at=datetime.fromisoformat(header["run_at"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if isinstance(claimed.input, _Undecodable):
        return replace(claimed, input={}, undecodable=claimed.input.reason)
    return claimed


def job_handed_unknown(
    conn: Conn, worker: str, held: Sequence[UUID], now: datetime | None, lease_s: float
) -> list[ClaimedJob]:
    """The unstarted hand-offs to ``worker`` it does not hold (``held``), as claimed rows, each
    lease renewed for its length as it is found (``lease_s`` for a lease row that names none)."""
    params = {"worker": worker, "held": list(held), "now": now, "lease_s": lease_s}
    rows = _claim_cursor(conn).execute(q("job_handed_unknown"), params).fetchall()
    return [_claimed(row) for row in rows]


def job_claim(conn: Conn, claim: ClaimParams, *, pooled: bool = False) -> list[ClaimedJob]:
    """Claim a batch, in a transaction of its own under ``tx_claim_plans`` (plans that walk
    the claim index whatever the statistics say), sent as one pipeline: one round trip. A row
    whose input cannot be decoded comes back with ``undecodable`` set (its input empty) instead
    of failing the batch. ``pooled``: the commit does not wait for the WAL flush (``set
    local``), for a connection without the claim connection's session setting
    (``claims_commit_async``), which behind PgBouncer would leak to other clients."""
    with conn.pipeline(), conn.transaction():
        conn.execute(q("tx_claim_plans"))
        if pooled:
            conn.execute(q("tx_claims_async"))
        claimed = _claim_cursor(conn).execute(q("job_claim"), claim.params())
    return [_claimed(row) for row in claimed.fetchall()]


def job_settle_then_claim(
    conn: Conn,
    settlements: Sequence[Settlement],
    claim: ClaimParams,
    *,
    durable: bool,
    starts: Sequence[tuple[UUID, UUID]] = (),
) -> tuple[set[UUID], list[ClaimedJob]]:
    """Write outcomes and claim the next batch in ONE transaction sent as ONE pipeline: a single
    round trip and a single commit per worker cycle. ``starts``: (job id, lease token) of bodies
    that started since the last write, recorded in the same transaction (``job_start``)."""
    with conn.pipeline(), conn.transaction():
        conn.execute(q("tx_claim_plans"))
        if durable:
            conn.execute(q("tx_outcomes_durable"))
        if starts:
            conn.execute(q("job_start"), _start_params(starts))
        settled = conn.execute(q("job_settle"), _settle_params(settlements, claim.now))
        claimed = _claim_cursor(conn).execute(q("job_claim"), claim.params())
    matched = {row[0] for row in settled.fetchall()}
    return matched, [_claimed(row) for row in claimed.fetchall()]


def claim_plans(conn: Conn) -> None:
    """Inside a transaction: its claims and settles walk indexes whatever the statistics say
    (``tx_claim_plans``)."""
    conn.execute(q("tx_claim_plans"))


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
                "kind": s.failure_kind,
            }
            for s in settlements
        ]
    )
    return {"batch": batch, "now": now, "outage_cap": OUTAGE_HANDBACKS}


def job_settle(
    conn: Conn,
    settlements: Sequence[Settlement],
    now: datetime | None,
    *,
    starts: Sequence[tuple[UUID, UUID]] = (),
) -> set[UUID]:
    """Write a batch of attempt outcomes; returns the ids whose lease still matched (fencing).
    ``starts``: as ``job_settle_then_claim``'s, recorded first (run it in a transaction: the
    worker's also runs ``claim_plans`` first)."""
    if starts:
        conn.execute(q("job_start"), _start_params(starts))
    if not settlements:
        return set()
    rows = conn.execute(q("job_settle"), _settle_params(settlements, now)).fetchall()
    return {row[0] for row in rows}


def _start_params(leases: Sequence[tuple[UUID, UUID]]) -> dict[str, Any]:
    return {"ids": [i for i, _ in leases], "tokens": [t for _, t in leases]}


def job_start(
    conn: Conn, leases: Sequence[tuple[UUID, UUID]], *, pooled: bool = False
) -> set[UUID]:
    """Record that the bodies of these (job id, lease token) start now; returns the ids whose
    lease is still there (only those may start). ``pooled``: in a transaction of its own whose
    commit does not wait for the WAL flush (``set local``, as ``job_claim(pooled=True)``), for a
    connection without the claim connection's session setting."""
    if not leases:
        return set()
    params = _start_params(leases)
    if not pooled:
        return {row[0] for row in conn.execute(q("job_start"), params).fetchall()}
    with conn.pipeline(), conn.transaction():
        conn.execute(q("tx_claims_async"))
        started = conn.execute(q("job_start"), params)
    return {row[0] for row in started.fetchall()}


def job_heartbeat(conn: Conn, leases: Sequence[tuple[UUID, UUID]], lease_s: float) -> set[UUID]:
    if not leases:
        return set()
    payload = json.dumps([{"id": str(i), "token": str(t)} for i, t in leases])
    rows = conn.execute(q("job_heartbeat"), {"leases": payload, "lease_s": lease_s}).fetchall()
    return {row[0] for row in rows}


def job_states(conn: Conn, ids: Sequence[UUID]) -> dict[UUID, tuple[JobState, UUID | None]]:
    rows = conn.execute(q("job_states"), {"ids": list(ids)}).fetchall()
    return {row[0]: (JobState(row[1]), row[2]) for row in rows}


@dataclass(frozen=True, slots=True)
class Rescued:
    """A job the rescue took back: where it went, and whether its body had started (an
    unstarted one is handed back uncounted)."""

    id: UUID
    state: JobState
    started: bool


def job_rescue_jobs(
    conn: Conn,
    *,
    limit: int,
    error: str,
    unstarted_error: str,
    now: datetime | None,
    lease_s: float | None = None,
) -> list[Rescued]:
    """Take back up to ``limit`` jobs whose lease ran out (in the database's uptime: see the
    statement). ``error`` is written to the jobs charged an attempt, ``unstarted_error`` to those
    whose body never started; ``lease_s`` is how long a lease of a worker from before migration
    0022 (which did not record its length) waits after a restart."""
    params = {
        "limit": limit,
        "error": error,
        "unstarted_error": unstarted_error,
        "now": now,
        "lease_s": lease_s or 0.0,
    }
    rows = conn.execute(q("job_rescue"), params).fetchall()
    return [Rescued(row[0], JobState(row[1]), bool(row[2])) for row in rows]


def job_rescue(
    conn: Conn, *, limit: int, error: str, now: datetime | None
) -> list[tuple[UUID, JobState]]:
    """``job_rescue_jobs`` as (id, state), one error for both kinds."""
    found = job_rescue_jobs(conn, limit=limit, error=error, unstarted_error=error, now=now)
    return [(r.id, r.state) for r in found]


def outage_grace(conn: Conn) -> tuple[datetime, datetime]:
    """(since when the server has been up, the database's now): no lease is rescued before it
    has had its length of that uptime."""
    row = conn.execute(q("job_outage_grace")).fetchone()
    assert row is not None
    return row[0], row[1]


def job_expire(conn: Conn, *, limit: int, error: str, now: datetime | None) -> list[UUID]:
    rows = conn.execute(q("job_expire"), {"limit": limit, "error": error, "now": now}).fetchall()
    return [row[0] for row in rows]
