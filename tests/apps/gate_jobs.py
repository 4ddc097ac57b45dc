"""A job whose body waits at a gate the test opens: the worker holds a finished body's outcome
while the test breaks the database connection under it."""

from __future__ import annotations

import threading

from ujobs_bridge import job

STARTED = threading.Event()
GATE = threading.Event()


@job(queue="gate")
def gated() -> str:
    STARTED.set()
    GATE.wait(30)
    return "through"
