"""Jobs the presence tests run: one that holds its worker slot until the test opens its gate."""

from __future__ import annotations

import threading

from ujobs_bridge import job

GATE = threading.Event()


@job(queue="basic")
def add(a: int, b: int) -> int:
    return a + b


@job(queue="basic")
def gated(n: int) -> int:
    GATE.wait(30)
    return n
