"""Jobs of the connection-budget and PgBouncer tests (``tests/test_connection_budget.py``,
``tests/test_pgbouncer.py``): a no-op, a job of two durable steps, and one that holds its body
slot a moment so a batch keeps every slot (and every step-pool connection) busy at once."""

from __future__ import annotations

import threading

from ujobs_bridge import job, step

QUEUE = "budget"
_pause = threading.Event()  # never set: ``wait`` is how a body holds its slot


@job(queue=QUEUE)
def noop(i: int) -> int:
    return i


def _twice(value: int) -> int:
    return value * 2


@job(queue=QUEUE, max_attempts=3, backoff=0, jitter=False)
def stepped(i: int, hold_s: float = 0.0) -> list[int]:
    first = step.run("first", _twice, i)
    _pause.wait(hold_s)
    second = step.run("second", _twice, first)
    return [first, second]
