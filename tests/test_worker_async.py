"""``async def`` bodies get the same attempt as sync ones, with or without a ``timeout=``.

Why it exists: an async body with a timeout used to run without its step runner, so its first
``step.run`` dead-lettered the job and ``current_job().connection()`` raised. The attempt core is
now one function for every runtime; these tests hold it to that.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ujobs_bridge import FrozenClock, Worker, WorkerConfig, current_job, job, step
from ujobs_bridge.client import Client
from ujobs_bridge.loading import build

QUEUE = "async-timeout"


def _double(x: int) -> int:
    return 2 * x


@job(queue=QUEUE, timeout=30)
async def timed_steps(x: int) -> int:
    doubled = await step.run_async("double", _double, x)
    tripled = step.run("triple", lambda: 3 * x)
    with current_job().connection() as conn:
        row = conn.execute("select 1").fetchone()
    assert row == (1,)
    return int(doubled) + int(tripled)


@pytest.fixture
def worker(dsn: str, clock: FrozenClock) -> Iterator[Worker]:
    w = Worker(dsn, build([timed_steps]), WorkerConfig(queues=(QUEUE,)), clock=clock)
    yield w
    w.stop(timeout_s=2)


def test_an_async_job_with_a_timeout_runs_its_steps_and_completes(
    frozen_client: Client, worker: Worker, db: psycopg.Connection[Any]
) -> None:
    ref = timed_steps.configure(client=frozen_client).enqueue(7)
    assert worker.tick() == 1
    row = db.execute(
        "select state, output, last_error from x_jobs where id = %s", (ref.id,)
    ).fetchone()
    assert row == ("done", 35, None)
    steps = db.execute(
        "select name, status, output from x_job_steps where run_id = %s order by ordinal",
        (ref.id,),
    ).fetchall()
    assert steps == [("double", "completed", 14), ("triple", "completed", 21)]
