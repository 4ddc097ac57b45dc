"""django-celery-results kept (``result_backend = "django-db"``): the same tasks run by a real
Celery worker (Celery's own embedded ``start_worker``, broker: the test kit's Redis, db 13) and
by a bridge worker leave the same ``TaskResult`` and ``GroupResult`` rows, field by field, times
and ids aside: status, result, traceback, ``meta``, content type and encoding, ``task_name``,
``task_args``/``task_kwargs``, ``worker``, ``periodic_task_name``; a chord's ``ChordCounter`` is
made and gone as in Celery and its body runs once; ``AsyncResult`` reads the rows; a message the
engine dead-lettered reads FAILURE though no row says so.

Django is configured once per process (``apps.celery_proj.settings``, as the other Django tests
do) and django-celery-results is put in ``INSTALLED_APPS`` while this module runs, its tables
migrated into the session database."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from typing import Any

import celery._state
import psycopg
import pytest
import redis
from celery import chain, chord, group, states
from celery.app.trace import reset_worker_optimizations, setup_worker_optimizations
from celery.contrib.testing.worker import start_worker
from psycopg.rows import dict_row

from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    worker,
)

pytestmark = pytest.mark.timeout(180)
NODE = f"celery@{socket.gethostname()}"
# The one frame each worker puts between Celery's tracer and the task's function: a Celery
# worker's stack protection (``setup_worker_optimizations``: ``__protected_call__``), the bridge
# worker's start of work (``celery_compat/worker/work_start.py``: ``run``).
PROTECTED_CALL = re.compile(
    r'  File "[^"]*(?:", line \d+, in __protected_call__|work_start\.py", line \d+, in run)\n'
    r".*\n(?:\s*\^+\n)?"
)
COLUMNS = (
    "task_id, task_name, task_args, task_kwargs, status, worker, content_type, content_encoding,"
    " result, traceback, meta, periodic_task_name, date_created, date_started, date_done"
)


@pytest.fixture(scope="module")
def django_results(pg_dsn: str) -> Iterator[Any]:
    """django-celery-results installed and migrated; the project module (its two apps), made
    as a Django project's ``celery.py`` makes its app: with ``DJANGO_SETTINGS_MODULE`` set, so
    Celery's Django fixup closes each task's database connections in both workers."""
    had_settings_module = "DJANGO_SETTINGS_MODULE" in os.environ
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "apps.celery_proj.settings")
    from django.conf import settings

    if not settings.configured:
        from apps.celery_proj import settings as process_settings

        process_settings.configure(pg_dsn)
    from django.core.management import call_command
    from django.test.utils import override_settings

    apps = [*settings.INSTALLED_APPS, "django_celery_results"]
    from celery.signals import task_postrun

    def close_thread_connections(**_: Any) -> None:
        """The workers' threads each open a Django connection for the rows; it is closed after
        each task, in its thread, so none is left for the garbage collector of a later test."""
        from django.db import connections

        connections.close_all()

    task_postrun.connect(close_thread_connections, weak=False)
    with override_settings(INSTALLED_APPS=apps):
        call_command("migrate", "django_celery_results", verbosity=0)
        from apps import celery_django_results as project

        yield project
        task_postrun.disconnect(close_thread_connections)
        for app in (project.bridge, project.plain):
            app.close()
        from django.db import connections

        connections.close_all()
    if not had_settings_module:  # later subprocesses (worker, demo) must not inherit it
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)


@pytest.fixture
def project(django_results: Any, dsn: str) -> Iterator[Any]:
    empty_results(dsn)
    client = redis.Redis.from_url(django_results.REDIS_URL)
    client.flushdb()  # db 13 of the test kit's own redis-server, this file's only
    yield django_results
    client.flushdb()
    client.close()


def empty_results(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "truncate django_celery_results_taskresult, django_celery_results_groupresult,"
            " django_celery_results_chordcounter"
        )


def rows(dsn: str, table: str, columns: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row)
        return cur.execute(f"select {columns} from {table}").fetchall()


def run_the_project(app: Any, made: dict[str, Any]) -> dict[str, Any]:
    """The same calls on either system; waits for every result; what each call returned."""
    got: dict[str, Any] = {}
    sent = {
        "add": made["add"].delay(2, 3),
        "greet": made["greet"].apply_async(
            ("Ada",), {"greeting": "hi"}, headers={"periodic_task_name": "morning greeting"}
        ),
        "fail": made["fail"].delay("on purpose"),
        "retried": made["retried"].delay("once"),
    }
    for name, result in sent.items():
        got[name] = result.get(timeout=60, propagate=False)
    saved = group(made["add"].s(1, 1), made["add"].s(2, 2)).apply_async()
    saved.save()
    got["group"] = saved.get(timeout=60)
    joined = chord([made["add"].s(1, 2), made["add"].s(3, 4)], made["total"].s()).apply_async()
    got["chord"] = joined.get(timeout=60)
    header = [chain(made["add"].s(1, 1), made["add"].s(2)), made["add"].s(5, 5)]
    got["chord of a chain"] = chord(header, made["total"].s()).apply_async().get(timeout=60)
    got["ids"] = {name: result.id for name, result in sent.items()} | {
        "group": saved.id,
        "chord": joined.id,
    }
    return got


def normalized(dsn: str) -> list[dict[str, Any]]:
    """Every TaskResult row without its times, ids (task ids inside ``meta`` and results too:
    each system makes its own) sorted by what stays. The ids are numbered in that order (then
    the groups'), not in the order the rows were written: two tasks running at once finish in
    either order, on either system."""
    found = sorted(
        rows(dsn, "django_celery_results_taskresult", COLUMNS),
        key=lambda r: (r["task_name"], r["task_args"] or "", r["status"]),
    )
    ids = [r["task_id"] for r in found] + task_ids(dsn)[len(found) :]
    for row in found:
        assert row["date_created"] is not None and row["date_done"] is not None
        started = row.pop("date_started")
        row["started_recorded"] = started is not None
        for key in ("task_id", "date_created", "date_done"):
            row.pop(key)
        if row["traceback"] is not None:
            row["traceback"] = PROTECTED_CALL.sub("", row["traceback"])
        for text_column in ("meta", "result"):
            if row[text_column] is not None:
                for n, tid in enumerate(ids):
                    row[text_column] = row[text_column].replace(tid, f"<id {n}>")
    return found


def groups(dsn: str) -> list[dict[str, Any]]:
    found = rows(dsn, "django_celery_results_groupresult", "content_type, content_encoding, result")
    for row in found:  # the result is the group's ids, nested: their shape only
        row["result"] = re.sub(r'"[0-9a-f-]{36}"', '"<id>"', row["result"])
    return found


def test_task_result_rows_equal_those_django_celery_results_writes(project: Any, dsn: str) -> None:
    current, default = celery._state.get_current_app(), celery._state.default_app
    # As in a prefork ``celery worker -n NODE`` (the production pool): tasks are traced with the
    # node name as their request's hostname (a thread pool's tracer would use the bare host).
    setup_worker_optimizations(project.plain, NODE)
    try:
        with start_worker(
            project.plain,
            pool="threads",
            concurrency=2,
            hostname=NODE,
            perform_ping_check=False,
            shutdown_timeout=30,
        ):
            on_celery = run_the_project(project.plain, project.TASKS["plain"])
    finally:
        reset_worker_optimizations(project.plain)
        project.plain.use_fast_trace_task = False
        celery._state._set_current_app(current)
        celery._state.default_app = default
    celery_rows = normalized(dsn)
    celery_groups = groups(dsn)
    assert rows(dsn, "django_celery_results_chordcounter", "group_id") == []
    empty_results(dsn)

    with bound(project.bridge, dsn), worker(project.bridge, dsn, concurrency=2, node_name=NODE):
        on_bridge = run_the_project(project.bridge, project.TASKS["bridge"])
    bridge_rows = normalized(dsn)

    for got in (on_celery, on_bridge):
        got.pop("ids")
        assert isinstance(got.pop("fail"), ValueError)
    assert (
        on_bridge
        == on_celery
        == {
            "add": 5,
            "greet": "hi Ada",
            "retried": "once after 1",
            "group": [2, 4],
            "chord": 10,
            "chord of a chain": 14,
        }
    )
    # 4 calls (a retry keeps its row), 2 group parts, a chord of 3, a chord of a chain: 4
    assert len(celery_rows) == 13
    for celery_row, bridge_row in zip(celery_rows, bridge_rows, strict=True):
        assert bridge_row == celery_row
    assert groups(dsn) == celery_groups
    assert rows(dsn, "django_celery_results_chordcounter", "group_id") == []
    by_name = {r["task_name"]: r for r in bridge_rows}
    assert by_name["dcr.greet"]["periodic_task_name"] == "morning greeting"
    assert by_name["dcr.fail"]["status"] == states.FAILURE
    assert by_name["dcr.fail"]["worker"] == NODE


def task_ids(dsn: str) -> list[str]:
    found = rows(dsn, "django_celery_results_taskresult", "task_id")
    groups_found = rows(dsn, "django_celery_results_groupresult", "group_id")
    return [r["task_id"] for r in found] + [g["group_id"] for g in groups_found]


def test_a_chord_part_delivered_twice_counts_once_and_the_body_is_sent_once(
    project: Any, dsn: str
) -> None:
    """django-celery-results decrements ``ChordCounter.count`` per call: a part returned twice (a
    redelivery) would end the count early. Here the count is of finished parts."""
    from celery.utils.objects import Bunch
    from django_celery_results.models import ChordCounter

    app, made = project.bridge, project.TASKS["bridge"]
    with bound(app, dsn):
        header = group(made["add"].s(1, 2), made["add"].s(3, 4)).freeze()
        body = made["total"].s()
        parts = [r.id for r in header.results]
        app.backend.apply_chord((header.id, header.results), body)

        def part_returns(n: int, value: int) -> None:
            app.backend.store_result(parts[n], value, states.SUCCESS)
            request = Bunch(id=parts[n], group=header.id, chord=dict(body), group_index=n)
            app.backend.on_chord_part_return(request, states.SUCCESS, value)

        part_returns(0, 3)
        part_returns(0, 3)  # delivered again
        assert ChordCounter.objects.get(group_id=header.id).count == 1
        assert body_jobs(dsn) == 0
        part_returns(1, 7)
        part_returns(1, 7)  # delivered again after the body was sent
        assert not ChordCounter.objects.filter(group_id=header.id).exists()
        assert body_jobs(dsn) == 1


def body_jobs(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select count(*) from x_jobs where name = 'dcr.total'").fetchone()
    assert row is not None
    return int(row[0])


def test_a_dead_lettered_message_reads_failure_though_its_row_was_never_finished(
    project: Any, dsn: str
) -> None:
    """The engine dead-letters a message whose workers keep dying: Celery's tracer never stored
    a result, so the TaskResult row (written STARTED here) is not final; ``AsyncResult`` reads
    the job rows as the Postgres backend does."""
    from celery.exceptions import WorkerLostError

    app, made = project.bridge, project.TASKS["bridge"]
    with bound(app, dsn):
        sent = made["add"].delay(1, 1)
        app.backend.store_result(sent.id, {"pid": 1}, states.STARTED)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "update x_jobs set state = 'dead', last_error = 'UJ_WORKER_LOST: killed'"
                " where name = 'dcr.add'"
            )
        fresh = app.AsyncResult(sent.id)
        assert fresh.state == states.FAILURE
        assert isinstance(fresh.result, WorkerLostError)
        assert "UJ_WORKER_LOST" in str(fresh.traceback)


def test_celery_backend_cleanup_on_a_bridge_worker_deletes_the_expired_rows(
    project: Any, dsn: str
) -> None:
    """Rows past ``result_expires`` go as Celery's ``celery.backend_cleanup`` task deletes them
    (the entry Celery's beat adds by itself; with the bridge's scheduler it is a
    ``beat_schedule`` entry of the project's own)."""
    from datetime import timedelta

    from django.utils import timezone
    from django_celery_results.models import TaskResult

    app = project.bridge
    with bound(app, dsn), worker(app, dsn):
        app.backend.store_result("finished-long-ago", 1, states.SUCCESS)
        app.backend.store_result("finished-now", 2, states.SUCCESS)
        long_ago = timezone.now() - app.conf.result_expires - timedelta(hours=1)
        TaskResult.objects.filter(task_id="finished-long-ago").update(date_done=long_ago)
        app.send_task("celery.backend_cleanup").get(timeout=60)
    kept = set(TaskResult.objects.values_list("task_id", flat=True))
    assert "finished-now" in kept and "finished-long-ago" not in kept
