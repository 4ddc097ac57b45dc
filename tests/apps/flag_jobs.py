"""``@job`` functions for the worker-flag tests: a job with no timeout of its own that runs
long (``--time-limit`` gives it one), and one that ignores its signal past its timeout until a
file exists (a hung body, for ``inspect active``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ujobs_bridge import current_job, job

_pause = threading.Event()


@job(queue="flagjobs", max_attempts=1)
def slow(seconds: float) -> str:
    """Watches its signal, as an @job body should: ends when the timeout aborts it."""
    signal = current_job().signal
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not signal.aborted:
        _pause.wait(0.05)
    return "aborted" if signal.aborted else "finished"


@job(queue="flagjobs", timeout=1, max_attempts=1)
def stuck(gate: str) -> str:
    """Ignores its signal: keeps its body slot past the timeout until ``gate`` exists."""
    deadline = time.monotonic() + 60
    while not Path(gate).exists() and time.monotonic() < deadline:
        _pause.wait(0.05)
    return "returned"
