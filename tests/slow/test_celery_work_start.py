"""A Celery task's attempt is charged only once Celery's tracer has called its function.

Why it exists: a Celery task's body starts with Celery's prologue (the request, the revoke and
expiry checks, ``task_prerun``, the STARTED state). A worker SIGKILLed there never ran the task:
like a prefetched message, the task must come back uncounted. One SIGKILLed after the function
began is charged, as any started body. Real worker processes, both pools; each test holds one
task in a ``task_prerun`` receiver and another in its function when the worker is killed
(``apps/celery_work_start.py``, one delivery allowed: a charged task ends dead).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from worker_proc import WorkerProc

from apps import celery_work_start as app_module
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from conftest import start_recorded, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
APP = "apps.celery_work_start"
QUEUE = "work_start"

Db = psycopg.Connection[Any]


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(*extra: str) -> WorkerProc:
        proc = WorkerProc(dsn, APP, QUEUE, tmp_path / f"w{len(started)}.log", extra=list(extra))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- worker {proc.pid} (exit {proc.proc.returncode}) ---\n{proc.output()[-4000:]}")


def _phases(db: Db, key: str) -> list[tuple[str, int]]:
    rows = db.execute(
        "select phase, pid from test_effects where key = %s order by at", (key,)
    ).fetchall()
    return [(str(phase), int(pid)) for phase, pid in rows]


def _row(db: Db, task_id: str) -> dict[str, Any]:
    found = (
        db.cursor(row_factory=dict_row)
        .execute(
            "select id, state, attempt, last_error, lease_expires_at < now() as expired"
            " from x_jobs where coalesce(input -> 'headers' ->> 'id', input ->> 'id') = %s",
            (task_id,),
        )
        .fetchone()
    )
    assert found is not None, task_id
    return found


@pytest.mark.parametrize(
    "pool", [("-c", "2"), ("-P", "prefork", "-c", "2")], ids=["threads", "prefork"]
)
def test_a_task_killed_in_celerys_prologue_is_handed_back_and_one_killed_in_its_function_charged(
    dsn: str, ledger: Db, workers: Any, pool: tuple[str, ...]
) -> None:
    with bound(app_module.app, dsn):
        in_prologue = app_module.held.delay("prologue", prologue=True).id
        in_function = app_module.held.delay("function").id
    first = workers(*pool)
    wait_for(lambda: _phases(ledger, "prologue"), timeout=60, what="the task_prerun receiver")
    wait_for(lambda: _phases(ledger, "function"), timeout=60, what="the function to start")
    function_job = _row(ledger, in_function)["id"]
    prologue_job = _row(ledger, in_prologue)["id"]
    wait_for(lambda: start_recorded(ledger, function_job), what="the function's start recorded")
    # the prologue's task is held there as long: its start is not recorded
    assert not start_recorded(ledger, prologue_job)
    first.kill()
    wait_for(
        lambda: _row(ledger, in_prologue)["expired"] and _row(ledger, in_function)["expired"],
        timeout=15,
        what="the leases to run out",
    )
    ledger.execute("insert into test_gates (name) values ('prerun'), ('prologue')")
    second = workers(*pool)
    wait_for(
        lambda: {_row(ledger, t)["state"] for t in (in_prologue, in_function)} <= {"done", "dead"},
        timeout=60,
        what="both tasks to end",
    )
    charged = _row(ledger, in_function)
    assert (charged["state"], charged["attempt"]) == ("dead", 1), charged
    assert "UJ_WORKER_LOST" in (charged["last_error"] or "")
    uncounted = _row(ledger, in_prologue)
    assert (uncounted["state"], uncounted["attempt"]) == ("done", 1), uncounted
    # the function of the task killed in its prologue ran once, under the second worker
    assert [phase for phase, _ in _phases(ledger, "prologue")] == [
        "prerun",
        "prerun",
        "start",
        "end",
    ]
    assert [phase for phase, _ in _phases(ledger, "function")] == ["start"]
    assert second.pid != first.pid
