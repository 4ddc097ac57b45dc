"""``async def`` bodies get the same attempt as sync ones, with or without a ``timeout=``; and
the worker's explicit collaborators (extra LISTEN channels, started/stopped events).

Why it exists: an async body with a timeout used to run without its step runner, so its first
``step.run`` dead-lettered the job and ``current_job().connection()`` raised. The attempt core is
now one function for every runtime; these tests hold it to that.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conftest import wait_for
from ujobs_bridge import FrozenClock, Worker, WorkerConfig, current_job, job, step
from ujobs_bridge._internal.config.loading import build
from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.service import Service
from ujobs_bridge._internal.worker.attempt import perform
from ujobs_bridge._internal.worker.listener import ExtraChannel
from ujobs_bridge.client import Client
from ujobs_bridge.records import ClaimedJob, JobState, Settlement

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


@job(queue="channels")
def noop() -> None:
    return None


def test_a_worker_listens_on_the_extra_channels_it_is_given(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """``Worker(channels=...)``: an extra LISTEN channel rides on the worker's own listener,
    passed to the constructor."""
    heard: list[str] = []
    closed: list[bool] = []

    def on_connect(conn: psycopg.Connection[Any]) -> None:
        conn.execute("listen uj_test_extra")

    extra = ExtraChannel("uj_test_extra", on_connect, heard.append, lambda: closed.append(True))
    w = Worker(dsn, build([noop]), WorkerConfig(queues=("channels",)), channels=[extra])
    w.start()
    try:
        assert isinstance(w.claim_loop, Service) and w.claim_loop.started.is_set()
        assert w.started.is_set() and w.listener.listening.wait(10)
        db.execute("select pg_notify('uj_test_extra', 'hello')")
        wait_for(lambda: heard == ["hello"], timeout=10, what="the extra channel's notification")
    finally:
        w.stop(timeout_s=2)
    assert w.stopped.is_set() and not w.started.is_set() and closed == [True]


@job(queue="core", timeout=0.05, max_attempts=2, backoff=0, jitter=False)
async def too_slow() -> None:
    await asyncio.sleep(30)


@job(queue="core")
def adds(a: int, b: int) -> int:
    return a + b


def claimed_of(name: str, *args: Any) -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(),
        name=name,
        queue="core",
        input={"args": list(args), "kwargs": {}},
        attempt=1,
        max_attempts=2,
        lease_token=uuid.uuid4(),
        expired=False,
    )


def test_perform_runs_one_attempt_through_the_core_without_a_database() -> None:
    """``attempt.perform``: the one attempt core, callable on its own (the test kit's base)."""
    claimed = claimed_of(adds.name, 2, 3)
    done = perform(adds, claimed, AttemptSignal())
    assert done is not None and (done.state, done.output_json) == (JobState.DONE, "5")
    slow = perform(too_slow, claimed_of(too_slow.name), AttemptSignal())
    assert slow is not None and slow.state is JobState.READY  # a timeout is a failed attempt
    assert slow.error is not None and "UJ_JOB_TIMEOUT" in slow.error


def test_perform_called_inside_a_running_loop_runs_an_async_body_on_a_fresh_one() -> None:
    async def inside() -> Settlement | None:
        return perform(too_slow, claimed_of(too_slow.name), AttemptSignal())

    slow = asyncio.run(inside())
    assert slow is not None and slow.error is not None and "UJ_JOB_TIMEOUT" in slow.error
