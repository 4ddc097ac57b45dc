"""A body that says when its real work starts (``work_starts_late``, ``ext.jobs.work_starts``):
its first delivery's start is recorded from that call on, never as the body begins; every other
job's start is recorded as its body begins, as before.

Why it exists: celery_compat declares its tasks so (Celery's prologue runs before the task's
function); the process-level proof is ``tests/slow/test_celery_work_start.py``. Here a worker in
this process runs two bodies side by side, one of each kind, and the lease rows show which
starts are recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import start_recorded, wait_for
from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge.client import Client
from ujobs_bridge.ext.jobs import work_starts

RELEASE = threading.Event()
SAID = threading.Event()
QUEUE = "work_starts"


@job(queue=QUEUE)
def plain() -> str:
    RELEASE.wait(30)
    return "plain"


def _late_body() -> str:
    SAID.wait(30)  # the prologue: until the test lets it say its work starts
    work_starts()
    work_starts()  # again: nothing more
    RELEASE.wait(30)
    return "late"


late = job(queue=QUEUE)(_late_body).with_options(work_starts_late=True)


@pytest.fixture
def worker(dsn: str) -> Iterator[Worker]:
    RELEASE.clear()
    SAID.clear()
    w = Worker(
        dsn, {d.name: d for d in (plain, late)}, WorkerConfig(queues=(QUEUE,), concurrency=2)
    )
    w.start()
    yield w
    RELEASE.set()
    SAID.set()
    w.stop(timeout_s=5)


def test_a_late_bodys_start_is_recorded_when_it_says_its_work_starts(
    client: Client, worker: Worker, db: Any
) -> None:
    late_ref = late.configure(client=client).enqueue()
    plain_ref = plain.configure(client=client).enqueue()
    # the plain body's start is recorded as it begins; the late one's waits for its word
    wait_for(lambda: start_recorded(db, plain_ref.id), what="the plain body's start")

    def late_state() -> Any:
        return db.execute("select state from x_jobs where id = %s", (late_ref.id,)).fetchone()

    # held by the worker (handed off at its insert, or claimed once woken: either may come
    # first on a loaded machine), its start still not recorded
    wait_for(lambda: late_state() == ("running",), what="the late job held by the worker")
    assert not start_recorded(db, late_ref.id)
    SAID.set()
    wait_for(lambda: start_recorded(db, late_ref.id), what="the late body's start")
    RELEASE.set()

    def outputs() -> Any:
        return db.execute(
            "select output from x_jobs where id = any(%s) and state = 'done' order by output",
            ([late_ref.id, plain_ref.id],),
        ).fetchall()

    assert wait_for(lambda: len(outputs()) == 2, what="both jobs done")
    assert outputs() == [("late",), ("plain",)]
