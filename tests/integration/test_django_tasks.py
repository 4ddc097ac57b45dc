"""Django's ``django.tasks`` on the ujobs-bridge backend (``ujobs_django``), as its docs describe
it, with the example project (``examples/django_tasks``) on the test database: ``enqueue`` and
``aenqueue`` write a job, the bridge worker runs it, ``get_result`` answers READY, RUNNING,
SUCCESSFUL with the return value, FAILED with the exception's class and traceback; priorities
order the runs; ``run_after`` holds a task until its time; queue names route it; a task that
``takes_context`` sees its own result; an enqueue inside ``transaction.atomic()`` commits or
rolls back with the block (the row is written on Django's own connection); and
``manage.py ujobs_worker`` runs a task from Django's settings alone and stops on SIGTERM.

Django is configured once per process (``settings.configure``): the process's configuration is
the one ``test_celery_django`` uses (same database), and the example's ``INSTALLED_APPS`` and
``TASKS`` are put over it with ``override_settings`` while this module runs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

from conftest import wait_for
from ujobs_bridge import FrozenClock, Worker, WorkerConfig
from ujobs_bridge.testing import run_until_idle

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_tasks"
QUEUES = ("default", "emails")


@pytest.fixture(scope="module")
def orders(pg_dsn: str) -> Iterator[ModuleType]:
    """The example's ``orders.tasks`` with its settings in force."""
    sys.path.insert(0, str(EXAMPLE))
    had_settings_module = "DJANGO_SETTINGS_MODULE" in os.environ
    from django.conf import settings

    if not settings.configured:
        from apps.celery_proj import settings as process_settings

        process_settings.configure(pg_dsn)
    from django.test.utils import override_settings
    from mysite import settings as example

    apps = [
        *settings.INSTALLED_APPS,
        *(a for a in example.INSTALLED_APPS if a not in settings.INSTALLED_APPS),
    ]
    with override_settings(INSTALLED_APPS=apps, TASKS=example.TASKS):
        from orders import tasks

        yield tasks
        from django.db import connections

        connections.close_all()
    sys.path.remove(str(EXAMPLE))
    if not had_settings_module:
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)


@pytest.fixture
def tasks(orders: ModuleType, dsn: str) -> ModuleType:
    orders.RAN.clear()
    return orders


def registry() -> dict[str, Any]:
    from ujobs_django.project import DjangoTasksApp

    return {d.name: d for d in DjangoTasksApp().jobs()}


def work(dsn: str, clock: FrozenClock | None = None) -> int:
    """Run what is due with a real worker, one body at a time, in this process."""
    config = WorkerConfig(queues=QUEUES, concurrency=1, prefetch_multiplier=1)
    worker = Worker(dsn, registry(), config, **({"clock": clock} if clock else {}))
    try:
        return run_until_idle(worker, timeout=30)
    finally:
        worker.stop(timeout_s=2)


def job_rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "select name, queue, priority, state, input from x_jobs order by created_at"
        ).fetchall()


def test_enqueue_writes_a_job_the_worker_runs_and_get_result_reads(
    tasks: ModuleType, dsn: str
) -> None:
    from orders.tasks import add

    from ujobs_django.compat import TaskResultStatus

    result = add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert job_rows(dsn) == [
        ("orders.tasks.add", "default", 0, "ready", {"args": [2, 3], "kwargs": {}})
    ]
    waiting = add.get_result(result.id)
    assert waiting.status == TaskResultStatus.READY and waiting.args == [2, 3]
    with pytest.raises(ValueError, match="not finished"):
        _ = waiting.return_value
    assert work(dsn) == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert result.is_finished and result.errors == [] and len(result.worker_ids) == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert tasks.RAN == ["add 2 3"]


def test_enqueue_refuses_what_django_refuses_and_writes_nothing(
    tasks: ModuleType, dsn: str
) -> None:
    from orders.tasks import add

    from ujobs_django.compat import InvalidTask

    with pytest.raises(TypeError, match="JSON"):
        add.enqueue(object(), 1)
    with pytest.raises(InvalidTask, match="not valid for backend"):
        add.using(queue_name="nowhere").enqueue(1, 1)  # not in the backend's QUEUES
    with pytest.raises(InvalidTask, match="aware"):
        add.using(run_after=datetime(2030, 1, 1)).enqueue(1, 1)  # naive: USE_TZ refuses it
    assert job_rows(dsn) == []


def test_a_failing_task_is_failed_with_its_exception_class_and_traceback(
    tasks: ModuleType, dsn: str
) -> None:
    from orders.tasks import PaymentDeclined, charge

    from ujobs_django.compat import TaskResultStatus

    result = charge.enqueue(40)
    assert work(dsn) == 1  # MAX_ATTEMPTS defaults to 1: no retry, as Django's semantics say
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is PaymentDeclined
    assert error.exception_class_path == "orders.tasks.PaymentDeclined"
    assert "card declined for 40" in error.traceback and "Traceback" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value
    assert tasks.RAN == ["charge 40"]


def test_a_backend_with_two_attempts_retries_and_keeps_each_error(
    tasks: ModuleType, dsn: str
) -> None:
    from orders.tasks import flaky_sync

    from ujobs_django.compat import TaskResultStatus

    clock = FrozenClock(datetime.now(UTC) + timedelta(seconds=1))
    result = flaky_sync.enqueue("north")
    assert work(dsn, clock) == 1
    result.refresh()
    assert result.status == TaskResultStatus.READY  # waiting for its second attempt
    assert [e.exception_class for e in result.errors] == [ConnectionError]
    clock.advance(timedelta(hours=1))  # past the backoff
    assert work(dsn, clock) == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "north synced"
    assert result.attempts == 2 and len(result.errors) == 1
    assert result.started_at < result.last_attempted_at
    assert tasks.RAN == ["flaky_sync north attempt 1", "flaky_sync north attempt 2"]


def test_higher_priority_runs_first_and_queue_names_route(tasks: ModuleType, dsn: str) -> None:
    from orders.tasks import rush, send_receipt, whenever

    whenever.enqueue("a")
    rush.enqueue("b")
    whenever.using(priority=60).enqueue("c")  # using() overrides the declared priority
    receipt = send_receipt.enqueue(7)
    rows = job_rows(dsn)
    assert [(r[1], r[2]) for r in rows] == [
        ("default", -50),
        ("default", 50),
        ("default", 60),
        ("emails", 0),
    ]
    assert work(dsn) == 4
    in_default = [r for r in tasks.RAN if not r.startswith("receipt")]
    assert in_default == ["whenever c", "rush b", "whenever a"]  # priority orders a queue
    receipt.refresh()
    assert receipt.return_value == {"order": 7, "sent": True}


def test_run_after_holds_a_task_until_its_time(tasks: ModuleType, dsn: str) -> None:
    from orders.tasks import add

    from ujobs_django.compat import TaskResultStatus

    now = datetime.now(UTC).replace(microsecond=0)
    clock = FrozenClock(now)
    later = add.using(run_after=now + timedelta(hours=1)).enqueue(1, 1)
    assert work(dsn, clock) == 0
    later.refresh()
    assert later.status == TaskResultStatus.READY
    clock.advance(timedelta(hours=1))
    assert work(dsn, clock) == 1
    later.refresh()
    assert later.return_value == 2


def test_takes_context_and_async_tasks_and_aenqueue(tasks: ModuleType, dsn: str) -> None:
    from orders.tasks import add_later, whoami

    mine = whoami.enqueue("hi")
    awaited = asyncio.run(add_later.aenqueue(4, 5))
    assert work(dsn) == 2
    mine.refresh()
    assert mine.return_value == {
        "id": mine.id,
        "attempt": 1,
        "note": "hi",
        "status": "RUNNING",  # get_result while the body runs
        "started": True,
    }
    awaited.refresh()
    assert awaited.return_value == 9


def test_enqueue_inside_atomic_commits_or_rolls_back_with_the_block(
    tasks: ModuleType, dsn: str
) -> None:
    from django.db import transaction
    from orders.tasks import add

    from ujobs_django.compat import TaskResultDoesNotExist

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), transaction.atomic():
        dropped = add.enqueue(10, 1)
        assert add.get_result(dropped.id).args == [10, 1]  # visible inside the block
        assert job_rows(dsn) == []  # not outside it
        raise Abandon
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(dropped.id)
    with transaction.atomic():
        kept = add.enqueue(20, 2)
        assert job_rows(dsn) == []
    assert [r[0] for r in job_rows(dsn)] == ["orders.tasks.add"]
    assert work(dsn) == 1
    assert add.get_result(kept.id).return_value == 22
    assert tasks.RAN == ["add 20 2"]


def test_a_failed_insert_is_a_django_database_error_that_marks_the_block_for_rollback(
    tasks: ModuleType, dsn: str
) -> None:
    from django.db import DatabaseError, connection, transaction
    from orders.tasks import add

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("set local search_path to pg_catalog")  # the jobs' tables out of sight
        with pytest.raises(DatabaseError):
            add.enqueue(1, 2)
        assert connection.needs_rollback  # as after a failed query of Django's own
    assert job_rows(dsn) == []


def test_manage_py_ujobs_worker_runs_a_task_and_stops_on_sigterm(
    tasks: ModuleType, dsn: str
) -> None:
    from orders.tasks import add

    result = add.enqueue(7, 8)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mysite.settings",
        "DATABASE_URL": dsn,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("UJOBS_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "ujobs_worker", "-c", "1", "--shutdown-timeout", "5"],
        cwd=EXAMPLE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: job_rows(dsn)[0][3] == "done", timeout=30, what="the task done")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "worker stopped: done=1" in out, out
    result.refresh()
    assert result.return_value == 15
