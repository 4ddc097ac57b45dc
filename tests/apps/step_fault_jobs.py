"""Step jobs that worker subprocesses run in the step fault tests. Side effects are recorded in
``test_effects`` on their own connection (the effect ledger), and a body can be held at a gate
(a row in ``test_gates``) so a test can kill or pause the worker at a known line."""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import psycopg

from ujobs_bridge import current_job, job, step


def _db() -> psycopg.Connection[Any]:
    return psycopg.connect(os.environ["UJOBS_DATABASE_URL"], autocommit=True)


def record(key: str, phase: str) -> None:
    ctx = current_job()
    with _db() as conn:
        conn.execute(
            "insert into test_effects (key, job_id, attempt, pid, phase) values (%s, %s, %s, %s, %s)",
            (key, ctx.id, ctx.attempt, os.getpid(), phase),
        )


def hold(gate: str) -> None:
    ctx = current_job()
    with _db() as conn:
        while conn.execute("select 1 from test_gates where name = %s", (gate,)).fetchone() is None:
            ctx.wait(0.05)


def charge(key: str, gate: str | None) -> dict[str, Any]:
    record(key, "charge")
    if gate:
        hold(gate)
    return {"charged": key, "pid": os.getpid()}


@job(queue="stepfaults", max_attempts=5, backoff=0, jitter=False)
def checkout(
    key: str, gate_in_step: str | None = None, gate_after: str | None = None
) -> dict[str, Any]:
    charged = step.run("charge", charge, key, gate_in_step)
    if gate_after:
        hold(gate_after)
    shipped = step.run("ship", lambda: {"shipped": key, "pid": os.getpid()})
    record(key, "end")
    return {"charge": charged, "ship": shipped, "finished_by": os.getpid()}


@job(queue="stepfaults", max_attempts=5, backoff=0, jitter=False)
def await_payment(key: str) -> dict[str, Any]:
    """F15: waits for ``payment.received`` under ``key``; the value it resumes with is returned
    and recorded, so a test can tell which event the step consumed and how often the body ended."""
    paid = step.wait_for_event("paid", "payment.received", key=key)
    record(key, "end")
    return {"paid": paid, "finished_by": os.getpid()}


_ledgers = threading.local()


def _ledger() -> psycopg.Connection[Any]:
    """This body thread's own ledger connection (many concurrent bodies write to it)."""
    conn: psycopg.Connection[Any] | None = getattr(_ledgers, "conn", None)
    if conn is None or conn.closed:
        conn = _ledgers.conn = _db()
    return conn


def note(key: str, phase: str) -> None:
    ctx = current_job()
    _ledger().execute(
        "insert into test_effects (key, job_id, attempt, pid, phase) values (%s, %s, %s, %s, %s)",
        (key, ctx.id, ctx.attempt, os.getpid(), phase),
    )


def effect(key: str, name: str) -> str:
    """A step's side effect: noted as run, answering a value no re-run could repeat."""
    note(key, f"ran:{name}")
    return f"{name}:{uuid.uuid4()}"


@job(queue="stepfaults", max_attempts=5, backoff=0, jitter=False)
def many_steps(key: str, count: int) -> list[str]:
    """``count`` steps in a row, each noted in the ledger once ``step.run`` returned (with the
    value it returned): a test kills the worker while many of these run at once."""
    values = []
    for i in range(count):
        value = step.run(f"s{i}", effect, key, f"s{i}")
        note(key, f"returned:s{i}:{value}")
        values.append(value)
    return values
