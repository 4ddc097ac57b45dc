"""Jobs that real worker subprocesses run in ``test_worker_faults.py``.

Why it exists: a fault test must see what a body really did, in a process it is about to kill or
pause, so every body writes its progress to the effect ledger (``test_effects``) on its own
autocommit connection (``UJOBS_DATABASE_URL``), and can be held at a gate (a row in
``test_gates``) so the test kills, pauses or drains the worker at a known line. Holding is
cooperative (``current_job().wait``), so a cancel, a lost lease or a drain reaches the body.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import psycopg

from ujobs_bridge import AttemptAborted, current_job, job


def _db() -> psycopg.Connection[Any]:
    return psycopg.connect(os.environ["UJOBS_DATABASE_URL"], autocommit=True)


def record(key: str, phase: str, detail: str | None = None) -> None:
    ctx = current_job()
    with _db() as conn:
        conn.execute(
            "insert into test_effects (key, job_id, attempt, pid, phase, detail)"
            " values (%s, %s, %s, %s, %s, %s)",
            (key, ctx.id, ctx.attempt, os.getpid(), phase, detail),
        )


def hold(gate: str) -> None:
    """Block until the gate row exists; raises ``AttemptAborted`` once the attempt is stopped."""
    ctx = current_job()
    with _db() as conn:
        while conn.execute("select 1 from test_gates where name = %s", (gate,)).fetchone() is None:
            ctx.wait(0.05)


@job(queue="faults", max_attempts=3, backoff=0, jitter=False)
def blocking(key: str, gate: str | None = None, first_attempt_only: bool = False) -> dict[str, Any]:
    """Record 'start', wait at ``gate`` (on every attempt, or only the first), record 'end'."""
    ctx = current_job()
    record(key, "start")
    try:
        if gate and not (first_attempt_only and ctx.attempt > 1):
            hold(gate)
    except AttemptAborted as exc:
        record(key, "aborted", exc.code.value)
        raise
    record(key, "end")
    return {"key": key, "pid": os.getpid(), "attempt": ctx.attempt}


@job(queue="faults", max_attempts=1, backoff=0, jitter=False)
def once(key: str, gate: str) -> dict[str, Any]:
    """One attempt only: record 'start', wait at ``gate``, record 'end'."""
    ctx = current_job()
    record(key, "start")
    hold(gate)
    record(key, "end")
    return {"key": key, "pid": os.getpid(), "attempt": ctx.attempt}


@job(queue="faults", max_attempts=2, backoff=0, jitter=False)
def kills_its_worker(key: str) -> None:
    """Record 'start', then SIGKILL the worker process running it, on every attempt."""
    record(key, "start")
    os.kill(os.getpid(), signal.SIGKILL)
    current_job().wait(30)  # never reached in practice: the process is gone


@job(queue="faults")
def noop(key: str) -> str:
    record(key, "end")
    return key
