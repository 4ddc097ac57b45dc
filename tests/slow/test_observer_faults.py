"""No observer can kill the thread or child that runs a body, and no slot is ever lost.

With OpenTelemetry's SDK set up (``apps.observer_jobs`` does it at import, in the worker and in
each pool child), a body that raises an exception nothing can print (its ``__str__`` raises, its
``__repr__`` raises, or formatting its traceback raises) fails its attempt like any other: the
job is retried or dead per its ``max_attempts`` with a readable error, nothing stays
``running``, and the worker's one slot (``-c 1``) serves the next jobs. The same for a Celery
task with signal receivers connected. A body thread that meets an error of our own between the
body's return and the settle (the ``attempt.before_settle`` fault point) has its attempt
settled (failed, retried per its policy, ``UJ_WORKER_LOST``) and keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from worker_proc import WorkerProc

from conftest import wait_for
from ujobs_bridge.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

QUICK = 5


@pytest.fixture
def procs() -> Iterator[list[WorkerProc]]:
    started: list[WorkerProc] = []
    yield started
    for proc in started:
        proc.close()
        print(f"--- worker {proc.pid} ---\n{proc.output()[-4000:]}")


def start(
    dsn: str, tmp_path: Path, procs: list[WorkerProc], *extra: str, faults: str = ""
) -> WorkerProc:
    from apps.observer_jobs import QUEUE

    worker = WorkerProc(
        dsn,
        "apps.observer_jobs",
        QUEUE,
        tmp_path / f"worker{len(procs)}.log",
        extra=["-c", "1", *extra],
        faults=faults,
    )
    procs.append(worker)
    return worker


def rows(db: psycopg.Connection[Any], ids: list[Any]) -> list[dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "select id, name, state, attempt, last_error, output from x_jobs where id = any(%s)",
            (ids,),
        ).fetchall()


def settled(db: psycopg.Connection[Any], ids: list[Any]) -> bool:
    return all(r["state"] in ("done", "dead") for r in rows(db, ids))


def quick_batch_runs_on(db: psycopg.Connection[Any], client: Client, pid: int, pool: str) -> None:
    """A batch of quick jobs all run, on the worker under test (its one slot came back)."""
    from apps.observer_jobs import quick

    refs = [quick.configure(client=client).enqueue(i) for i in range(QUICK)]
    ids = [r.id for r in refs]
    wait_for(lambda: settled(db, ids), timeout=60, what="the quick jobs to run")
    done = rows(db, ids)
    assert {r["state"] for r in done} == {"done"}
    if pool == "threads":
        assert {r["output"]["pid"] for r in done} == {pid}
    else:
        assert all(r["output"]["pid"] != pid for r in done)  # in a pool child


def nothing_running(db: psycopg.Connection[Any]) -> None:
    running = db.execute("select count(*) from x_jobs where state = 'running'").fetchone()
    assert running == (0,)


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_an_unprintable_exception_fails_its_job_and_the_slot_comes_back(
    dsn: str,
    client: Client,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    procs: list[WorkerProc],
    pool: str,
) -> None:
    from apps.observer_jobs import bad_repr, bad_str, bad_traceback

    worker = start(dsn, tmp_path, procs, "--pool", pool)
    refs = [
        bad_str.configure(client=client).enqueue(),
        bad_repr.configure(client=client).enqueue(),
        bad_traceback.configure(client=client).enqueue(),
    ]
    ids = [r.id for r in refs]
    wait_for(lambda: settled(db, ids), timeout=90, what="the failing jobs to be settled")
    by_name = {r["name"].rsplit(".", 1)[1]: r for r in rows(db, ids)}
    assert {n: (r["state"], r["attempt"]) for n, r in by_name.items()} == {
        "bad_str": ("dead", 2),  # failed, retried once per its max_attempts, then dead
        "bad_repr": ("dead", 1),
        "bad_traceback": ("dead", 1),
    }
    assert "UnprintableError: <exception str() failed>" in by_name["bad_str"]["last_error"]
    assert "UnreprableError: hidden" in by_name["bad_repr"]["last_error"]
    assert (
        "UnformattableError: hidden (its traceback could not be formatted"
        in (by_name["bad_traceback"]["last_error"])
    )
    quick_batch_runs_on(db, client, worker.pid, pool)
    nothing_running(db)


def test_a_body_thread_that_fails_before_the_settle_settles_its_attempt_and_serves_on(
    dsn: str, client: Client, db: psycopg.Connection[Any], tmp_path: Path, procs: list[WorkerProc]
) -> None:
    """``exit``: a SystemExit, which no ``except Exception`` catches, raised in the body thread
    after the body returned and before its attempt is settled."""
    from apps.observer_jobs import quick

    worker = start(dsn, tmp_path, procs, faults="attempt.before_settle=exit@1")
    ref = quick.configure(client=client).enqueue(-1)
    wait_for(lambda: settled(db, [ref.id]), timeout=60, what="the job to be settled")
    (row,) = rows(db, [ref.id])
    assert (row["state"], row["attempt"]) == ("done", 2)  # the first attempt failed, retried
    assert "UJ_WORKER_LOST" in (row["last_error"] or "")
    assert "injected exit" in (row["last_error"] or "")
    quick_batch_runs_on(db, client, worker.pid, "threads")
    nothing_running(db)


def test_a_celery_task_raising_an_unprintable_exception_fails_and_the_slot_comes_back(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path, procs: list[WorkerProc]
) -> None:
    """Under the thread pool, with task signal receivers that read the exception (its text and
    its repr, which raise) and task events on (``-E``)."""
    from apps import celery_observer_app as c
    from apps.celery_harness import bound

    worker = WorkerProc(
        dsn,
        "apps.celery_observer_app",
        "observed_celery",
        tmp_path / "celery-worker.log",
        extra=["--pool", "threads", "-c", "1", "-E"],
    )
    procs.append(worker)
    with bound(c.app, dsn):
        failing = [c.bad_str.delay(), c.bad_repr.delay(), c.bad_traceback.delay()]
        for result in failing:
            result.get(timeout=60, propagate=False)
            assert result.state == "FAILURE"
        quick = [c.quick.delay(i) for i in range(QUICK)]
        assert {r.get(timeout=60)["pid"] for r in quick} == {worker.pid}
    ids = [r[0] for r in db.execute("select id from x_jobs").fetchall()]
    # a result is stored before the worker's outcome batch writes the row
    wait_for(lambda: settled(db, ids), timeout=30, what="the task rows to be settled")
    with db.cursor(row_factory=dict_row) as cur:
        by_name = {
            r["name"].rsplit(".", 1)[1]: r
            for r in cur.execute("select name, state, attempt, last_error from x_jobs").fetchall()
        }
    for name in ("bad_str", "bad_repr", "bad_traceback"):
        assert (by_name[name]["state"], by_name[name]["attempt"]) == ("dead", 1), name
    assert "UnprintableError: <exception str() failed>" in by_name["bad_str"]["last_error"]
    assert "UnreprableError" in by_name["bad_repr"]["last_error"]
    # Celery's tracer formats the traceback itself, and raises out of the run: that error is
    # what the job fails with, readable
    assert "its traceback could not be formatted" in by_name["bad_traceback"]["last_error"]
    assert "__notes__ refuses" in by_name["bad_traceback"]["last_error"]
    nothing_running(db)
