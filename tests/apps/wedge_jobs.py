"""Jobs that wedge a worker if it lets them: bodies that hang past their timeout ignoring every
signal (on a socket, or in ``time.sleep``), raise ``SystemExit`` / ``KeyboardInterrupt``, kill
their own pool child, or return a result of hundreds of megabytes.

Why it exists: ``test_worker_wedges.py`` runs them in real worker subprocesses and asserts that
the worker goes on. Every body records its progress in the effect
ledger (``test_effects``, see ``fault_jobs.record``); a hung body blocks on a LISTEN for its gate
(``open_gate`` inserts the row and notifies), never on ``current_job().wait``, so no signal of
the attempt reaches it.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from apps.fault_jobs import _db, hold, record
from ujobs_bridge import current_job, job


def _gate_open(gate: str) -> bool:
    with _db() as conn:
        return (
            conn.execute("select 1 from test_gates where name = %s", (gate,)).fetchone() is not None
        )


@job(queue="wedges", timeout=1, max_attempts=1, priority=10)
def hangs(key: str, gate: str) -> str:
    """Record 'start', then block (ignoring the attempt's signal) until ``gate`` opens."""
    record(key, "start")
    with _db() as conn:
        conn.execute("listen test_gates")  # before the check: an opening in between is queued
        while not _gate_open(gate):
            # blocks on the socket until a gate opens; the timeout only re-checks the row
            for _ in conn.notifies(timeout=5, stop_after=1):
                pass
    record(key, "end")
    return key


@job(queue="wedges")
def quick(key: str) -> dict[str, Any]:
    record(key, "end")
    return {"key": key, "pid": os.getpid()}


@job(queue="wedges", max_attempts=3, backoff=0, jitter=False)
def exits(key: str, kind: str) -> None:
    """Record 'start', then raise ``SystemExit`` or ``KeyboardInterrupt`` (``kind``)."""
    record(key, "start")
    if kind == "exit":
        raise SystemExit(3)
    raise KeyboardInterrupt


@job(queue="wedges", max_attempts=3, backoff=0, jitter=False)
def kills_its_child(key: str) -> dict[str, Any]:
    """On its first attempt, SIGKILL the pool child running it (as the OOM killer would)."""
    ctx = current_job()
    record(key, "start")
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    record(key, "end")
    return {"key": key, "pid": os.getpid(), "attempt": ctx.attempt}


@job(queue="wedges")
def echo(value: Any) -> str:
    return "decoded"


@job(queue="wedges")
def held(key: str, gate: str) -> str:
    """Record 'start', then wait at ``gate`` cooperatively (a drain or a cancel reaches it)."""
    record(key, "start")
    hold(gate)
    return key


@job(queue="wedges", max_attempts=1)
def spins_in_c(key: str) -> int:
    """Record 'start', then run one long C call that never releases the GIL (no Python thread
    of this process runs until it returns)."""
    record(key, "start")
    return sum(range(10**13))


@job(queue="wedges", timeout=2, max_attempts=2, priority=10)
def sleeps(key: str, seconds: float) -> str:
    """Record 'start', then block in ``time.sleep`` without ever looking at the attempt's signal
    (every attempt: a retry hangs too)."""
    record(key, "start")
    time.sleep(seconds)
    record(key, "end")
    return key


@job(queue="wedges", max_attempts=1, priority=10)
def big(key: str, megabytes: float) -> str:
    """Record 'start', then return a string of ``megabytes`` MiB (its JSON is 2 bytes longer)."""
    record(key, "start")
    return "x" * int(megabytes * 1024 * 1024)
