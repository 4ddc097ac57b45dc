"""The Postgres side of durable steps and events: each function runs named statements.

Why it exists: a step's result must be in the database, written under the attempt's lease token,
BEFORE ``step.run`` returns; event consumption must be idempotent for the (run, step) that took
the event. These functions are those writes, nothing more; ``steps.py`` decides when to call them.

What it is not: the replay logic.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.sql import q
from ujobs_bridge._internal.faults import fault

Conn = psycopg.Connection[Any]
_text = json.JSONEncoder(ensure_ascii=False).encode


@dataclass(frozen=True, slots=True)
class StepRecord:
    name: str
    ordinal: int
    status: str
    output: Any
    attempts: int
    error: str | None
    job_attempt: int
    started_at: datetime
    completed_at: datetime | None
    wake_at: datetime | None
    event: str | None
    correlation_key: str | None


@dataclass(frozen=True, slots=True)
class Lease:
    run_id: UUID
    token: UUID
    job_attempt: int


def step_list(conn: Conn, run_id: UUID) -> list[StepRecord]:
    rows = conn.execute(q("step_list"), {"run_id": run_id}).fetchall()
    return [StepRecord(*row) for row in rows]


def _base(lease: Lease, name: str, ordinal: int) -> dict[str, Any]:
    return {
        "run_id": lease.run_id,
        "token": lease.token,
        "name": name,
        "ordinal": ordinal,
        "job_attempt": lease.job_attempt,
    }


@dataclass(frozen=True, slots=True)
class StepResult:
    """One step's result to persist under its attempt's lease: ``output_json`` is JSON text."""

    lease: Lease
    name: str
    ordinal: int
    output_json: str
    started_at: datetime

    def item(self) -> str:
        """This result as one element of ``steps_complete``'s batch document. The output is
        embedded as it is (it is already JSON), so nothing is encoded twice."""
        lease = self.lease
        return (
            f'{{"run_id":"{lease.run_id}","token":"{lease.token}","name":{_text(self.name)},'
            f'"ordinal":{self.ordinal:d},"job_attempt":{lease.job_attempt:d},'
            f'"started_at":"{self.started_at.isoformat()}","output":{self.output_json}}}'
        )


def steps_complete(conn: Conn, results: Sequence[StepResult]) -> set[tuple[UUID, str]]:
    """Persist ``results`` in ONE statement (on an autocommit connection: one commit) and answer
    the ``(run_id, name)`` of each row written. One not written had lost its lease, or its row
    was already completed by an earlier ambiguous commit: the caller reads it back. No two
    results may share a ``(run_id, name)``."""
    batch = "[" + ",".join(r.item() for r in results) + "]"
    rows = conn.execute(q("steps_complete"), {"batch": batch}).fetchall()
    fault("step.after_persist")
    return {(row[0], row[1]) for row in rows}


def step_fail(
    conn: Conn, lease: Lease, name: str, ordinal: int, error: str, started_at: datetime
) -> bool:
    row = conn.execute(
        q("step_fail"), {**_base(lease, name, ordinal), "error": error, "started_at": started_at}
    ).fetchone()
    return row is not None


def step_suspend(
    conn: Conn,
    lease: Lease,
    name: str,
    ordinal: int,
    *,
    status: str,
    wake_at: datetime | None,
    duration_s: float | None,
    event: str | None,
    correlation_key: str | None,
    now: datetime | None,
) -> tuple[bool, datetime | None]:
    row = conn.execute(
        q("step_suspend"),
        {
            **_base(lease, name, ordinal),
            "status": status,
            "wake_at": wake_at,
            "duration_s": duration_s,
            "event": event,
            "correlation_key": correlation_key,
            "now": now,
        },
    ).fetchone()
    if row is None:
        return False, None
    return True, row[1]


def step_wake_if_due(
    conn: Conn, lease: Lease, name: str, now: datetime | None, output_json: str = "null"
) -> bool:
    """Complete a sleeping/waiting step whose wake time has come, storing ``output_json``."""
    row = conn.execute(
        q("step_wake_if_due"),
        {
            "run_id": lease.run_id,
            "token": lease.token,
            "name": name,
            "now": now,
            "output": output_json,
        },
    ).fetchone()
    return row is not None


def lease_held(conn: Conn, lease: Lease) -> bool:
    return (
        conn.execute(
            q("step_lease_check"), {"run_id": lease.run_id, "token": lease.token}
        ).fetchone()
        is not None
    )


def event_take(
    conn: Conn,
    lease: Lease,
    name: str,
    ordinal: int,
    *,
    event: str,
    correlation_key: str,
    retention_s: float,
    started_at: datetime,
    now: datetime | None,
) -> tuple[str, Any]:
    """In ONE transaction: under the lease, return the event this (run, step) already consumed,
    or consume the oldest open one and complete the step with it. Answers ("lost", None),
    ("none", None) or ("event", payload)."""
    with conn.transaction():
        if not lease_held(conn, lease):
            return "lost", None
        row = conn.execute(
            q("event_consumed_by"), {"run_id": lease.run_id, "name": name}
        ).fetchone()
        if row is None:
            row = conn.execute(
                q("event_consume"),
                {
                    "run_id": lease.run_id,
                    "name": name,
                    "event": event,
                    "correlation_key": correlation_key,
                    "retention_s": retention_s,
                    "now": now,
                },
            ).fetchone()
        if row is None:
            return "none", None
        payload = row[0]
        output = json.dumps({"event": event, "key": correlation_key, "payload": payload})
        conn.execute(
            q("step_complete"),
            {**_base(lease, name, ordinal), "output": output, "started_at": started_at},
        )
    fault("event.after_consume_commit")
    return "event", payload


def event_send(
    conn: Conn, event: str, correlation_key: str, payload_json: str, now: datetime | None
) -> tuple[int, int]:
    row = conn.execute(
        q("event_send"),
        {"event": event, "correlation_key": correlation_key, "payload": payload_json, "now": now},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])
