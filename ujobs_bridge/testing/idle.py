"""``run_until_idle(worker)``: tick a ``Worker`` until nothing it can run is due.

Why it exists: an integration test enqueues some jobs, lets a real worker (its claim, runtimes,
steps and batched settle) work through them, then asserts on the rows. Ticking by hand needs a
guess of how many passes; sleeping is flaky. This ticks until the database answers that no ready
job of the worker's queues and job names is due (by the worker's clock), with a deadline.

What it is not: a running worker. Nothing happens between calls; retries scheduled for later
stay scheduled until the test moves its ``FrozenClock`` and calls again.
"""

from __future__ import annotations

import threading
import time

from ujobs_bridge._internal.db import testing as testing_db
from ujobs_bridge._internal.db.connections import Role, connect
from ujobs_bridge._internal.worker.loop import Worker

ROLE = Role("testing:idle")
RECHECK_S = 0.02  # a due job another session holds locked: look again after this


def run_until_idle(worker: Worker, *, timeout: float = 30.0) -> int:
    """Tick until no job the worker can run is due; returns how many attempts ran. Raises
    ``TimeoutError`` if jobs are still due when ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    ran = 0
    with connect(worker.dsn, ROLE) as conn:
        while True:
            left = max(0.0, deadline - time.monotonic())
            claimed = worker.tick(timeout_s=left)
            ran += claimed
            due = testing_db.jobs_due(
                conn,
                testing_db.DueJobs(
                    queues=worker.queues, names=worker.names, now=worker.clock.sql_now()
                ),
            )
            if not due:
                return ran
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{due} job(s) still due for worker {worker.id} after {timeout}s"
                )
            if not claimed:  # due but not claimable now (locked elsewhere): wait, then retry
                pause.wait(min(RECHECK_S, left))
