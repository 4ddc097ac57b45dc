"""Enqueue in SQL (``sql/jobs.sql``): one job, one job on an async connection, or a whole batch.

Why it exists: the engine's enqueues (``Client.enqueue`` and ``enqueue_many``, a job's
``enqueue`` in the caller's transaction, sync or async, the outbox relay, the scheduler's fires,
the test kit's ``perform``) all insert through these statements, with one rule for an
idempotency key a live job holds: the holder answers, as ``existing``. Each function runs on the
connection it is given, so an enqueue commits with the caller's own writes when the caller
wants it to. They insert through the one insert (``x_jobs_insert``), except a one-by-one enqueue
on a client's own connection (``OwnEnqueues``): one plain statement (``job_enqueue_one``, the
same columns and values), run through libpq directly where it can (``direct.py``), so it is one
round trip, one statement and one commit, with the send commit the user chose
(``jobs/send_commit.py``) set inside that statement.

What it is not: the validation of what is enqueued (``client.py``, ``job.py``) or a claim
(``leases.py``): nothing here takes a lease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db import arrays
from ujobs_bridge._internal.db.direct import DirectStatement
from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.errors import JobStateError
from ujobs_bridge.records import JobRef

Conn = psycopg.Connection[Any]
log = logging.getLogger("ujobs.db")


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

    def insert() -> JobRef | None:
        row = conn.execute(q("job_enqueue"), spec.params(now)).fetchone()
        return None if row is None else JobRef(row[0], spec.name)

    return _answered(conn, spec, insert)


def _answered(conn: Conn, spec: EnqueueSpec, insert: Callable[[], JobRef | None]) -> JobRef:
    """``insert()``'s job; when it inserted nothing and named no holder, the live job holding
    the key (asked once more if the holder finished in between), else the id was taken."""
    ref = insert()
    if ref is not None:
        return ref
    if spec.idempotency_key is None:
        raise _id_taken(spec)
    existing = conn.execute(
        q("job_get_live_by_key"), {"idempotency_key": spec.idempotency_key}
    ).fetchone()
    if existing is None:  # the live holder finished between the two statements: try once more
        ref = insert()
        if ref is not None:
            return ref
        existing = conn.execute(
            q("job_get_live_by_key"), {"idempotency_key": spec.idempotency_key}
        ).fetchone()
        assert existing is not None
    return JobRef(existing[0], spec.name, existing=True)


_ONE = DirectStatement("ujobs_job_enqueue_one", q("job_enqueue_one"))
_ONE_DEFINER = DirectStatement("ujobs_job_enqueue_one_definer", q("job_enqueue_one_definer"))


class OwnEnqueues:
    """One-by-one enqueues on connections a client holds alone, in autocommit (its pool's):
    ``job_enqueue_one``, one statement that is its own transaction, through libpq directly where
    ``DirectStatement.usable`` says so (else psycopg's cursor: behind PgBouncer).

    A role that may not insert into ``x_jobs`` itself (a producer, granted only the functions:
    ``db grant --producer``) is refused the plain statement: from then on this client sends
    ``job_enqueue_one_definer`` (the same answer through ``x_jobs_insert``). The refused
    statement wrote nothing (it was its own transaction)."""

    def __init__(self) -> None:
        self.definer = False

    def enqueue(
        self, conn: Conn, spec: EnqueueSpec, now: datetime | None, commit_level: str | None
    ) -> JobRef:
        """``spec``'s job, or the live job holding its key; ``commit_level``: the
        ``synchronous_commit`` of the statement's own transaction (None: the server's)."""
        params = spec.params(now)
        params["send_commit"] = commit_level

        def insert() -> JobRef | None:
            row = self._row(conn, params)
            return None if row is None else JobRef(row[0], spec.name, existing=bool(row[1]))

        return _answered(conn, spec, insert)

    def _row(self, conn: Conn, params: dict[str, Any]) -> tuple[Any, ...] | None:
        if not self.definer:
            try:
                return _run(_ONE, "job_enqueue_one", conn, params)
            except psycopg.errors.InsufficientPrivilege:
                log.debug("ujobs.db.enqueue_as_definer: this role may not insert into x_jobs")
                self.definer = True
        return _run(_ONE_DEFINER, "job_enqueue_one_definer", conn, params)


def _run(
    statement: DirectStatement, name: str, conn: Conn, params: dict[str, Any]
) -> tuple[Any, ...] | None:
    if DirectStatement.usable(conn):
        return statement.first_row(conn, params, 2)
    row = conn.execute(q(name), params).fetchone()
    return None if row is None else tuple(row)


def set_send_commit(conn: Conn, commit_level: str | None) -> None:
    """``synchronous_commit`` for the rest of ``conn``'s open transaction (one the engine owns:
    ``enqueue_many`` through the pool); None: nothing to set."""
    if commit_level is not None:
        conn.execute(q("send_commit_set"), {"level": commit_level})


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
