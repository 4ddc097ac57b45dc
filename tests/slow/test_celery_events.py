"""Celery's task and worker events from a real ``ujobs-bridge worker -E`` process: captured from the
cutover broker (Redis db 3) with Celery's own ``app.events.Receiver``, with Celery's names, fields
and types; the same events readable from Postgres (``celery_compat.events.log``); none without
``-E``; a broker that is down costs the tasks nothing (one warning, no wedge)."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery.exceptions import Reject
from events_support import BROKER, captured, redis_or_skip
from worker_proc import WorkerProc

from apps import celery_events_app as ev
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from celery_compat.events import log as event_log
from conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

HOST = socket.gethostname()
NODE = f"ev1@{HOST}"
COMMON = {"type", "hostname", "utcoffset", "pid", "clock", "timestamp"}


@pytest.fixture(autouse=True)
def _redis() -> None:
    redis_or_skip()


@pytest.fixture
def broker_env() -> Iterator[None]:
    os.environ["EVENTS_APP_BROKER"] = BROKER
    yield
    os.environ.pop("EVENTS_APP_BROKER", None)


def stored(dsn: str, **filters: Any) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return event_log.read(conn, **filters)


def stop(worker: WorkerProc) -> None:
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=30) == 0


def check_common(event: dict[str, Any], pid: int) -> None:
    assert set(event) >= COMMON, event
    assert event["hostname"] == NODE
    assert event["pid"] == pid
    assert isinstance(event["utcoffset"], int | float) and isinstance(event["clock"], int)
    assert isinstance(event["timestamp"], float)


def test_a_worker_with_E_sends_celerys_events_to_the_broker_and_to_postgres(
    dsn: str, tmp_path: Path, broker_env: None
) -> None:
    with captured(ev.app) as capture:
        worker = WorkerProc(
            dsn,
            "apps.celery_events_app",
            "events",
            tmp_path / "w.log",
            extra=["-E", "-n", "ev1@%h"],
        )
        try:
            online = capture.one("worker-online", hostname=NODE)
            with bound(ev.app, dsn):
                added = ev.add.delay(2, 3)
                assert added.get(timeout=30) == 5
                failed = ev.boom.delay("no luck")
                with pytest.raises(ValueError, match="no luck"):
                    failed.get(timeout=30)
                retried = ev.flaky.delay()
                assert retried.get(timeout=30) == "second time"
                rejected = ev.refuse.delay()
                capture.one("task-rejected", uuid=rejected.id)
            heartbeat = capture.one("worker-heartbeat", hostname=NODE)
            stop(worker)
            offline = capture.one("worker-offline", hostname=NODE)
        except BaseException:
            print(worker.output())
            raise
        finally:
            worker.close()

    pid = worker.pid
    for event in (online, heartbeat, offline):
        check_common(event, pid)
        assert event["freq"] == 2.0
        assert isinstance(event["active"], int) and isinstance(event["processed"], int)
        assert len(event["loadavg"]) == 3
        assert event["sw_ident"] == "py-celery" and event["sw_ver"] and event["sw_sys"]
    assert offline["processed"] >= 5  # add, boom, flaky twice, refuse

    received = capture.one("task-received", uuid=added.id)
    check_common(received, pid)
    assert received["name"] == ev.add.name == "apps.celery_events_app.add"
    assert (received["args"], received["kwargs"]) == ("(2, 3)", "{}")
    assert received["retries"] == 0 and received["root_id"] == added.id
    assert received["parent_id"] is None and received["eta"] is None
    assert received["expires"] is None
    started = capture.one("task-started", uuid=added.id)
    succeeded = capture.one("task-succeeded", uuid=added.id)
    assert succeeded["result"] == "5" and isinstance(succeeded["runtime"], float)
    assert received["clock"] < started["clock"] < succeeded["clock"]

    boom = capture.one("task-failed", uuid=failed.id)
    assert boom["exception"] == "ValueError('no luck')"
    assert "Traceback" in boom["traceback"] and "no luck" in boom["traceback"]

    retry = capture.one("task-retried", uuid=retried.id)
    assert retry["exception"].startswith("Retry(") and isinstance(retry["traceback"], str)
    # the retry is a new message with the same id: received again, with retries=1, then succeeds
    assert [e["retries"] for e in capture.of("task-received", uuid=retried.id)] == [0, 1]
    assert capture.one("task-succeeded", uuid=retried.id)["result"] == "'second time'"

    reject = capture.one("task-rejected", uuid=rejected.id)
    assert reject["requeue"] is False
    refused = Reject("not for us", requeue=False)
    assert capture.one("task-failed", uuid=rejected.id)["exception"] == repr(refused)

    # the same events, stored in Postgres (flushed in batches: wait for the last ones)
    wait_for(
        lambda: stored(dsn, hostname=NODE, types=["worker-offline"]), what="events in Postgres"
    )
    in_pg = stored(dsn, task_id=added.id)
    assert [e["type"] for e in in_pg] == ["task-received", "task-started", "task-succeeded"]
    assert in_pg[2]["result"] == "5" and in_pg[2]["hostname"] == NODE
    assert in_pg[2]["clock"] == succeeded["clock"]  # one event, two copies
    assert isinstance(in_pg[2]["utcoffset"], int | float)  # hours; a float since Celery 5.7
    assert isinstance(in_pg[2]["timestamp"], float)
    types = {e["type"] for e in stored(dsn, hostname=NODE)}
    assert {"worker-online", "worker-heartbeat", "task-retried", "task-rejected"} <= types
    later = stored(dsn, after_id=in_pg[0]["id"], task_id=added.id)
    assert [e["type"] for e in later] == ["task-started", "task-succeeded"]


def test_without_E_the_worker_sends_no_events(dsn: str, tmp_path: Path, broker_env: None) -> None:
    worker = WorkerProc(dsn, "apps.celery_events_app", "events", tmp_path / "w.log")
    try:
        with bound(ev.app, dsn):
            assert ev.add.delay(1, 1).get(timeout=30) == 2
        stop(worker)
    except BaseException:
        print(worker.output())
        raise
    finally:
        worker.close()
    assert stored(dsn) == []


def test_a_broker_that_is_down_costs_the_tasks_nothing(dsn: str, tmp_path: Path) -> None:
    os.environ["EVENTS_APP_BROKER"] = "redis://127.0.0.1:1/3"  # nothing listens there
    try:
        worker = WorkerProc(
            dsn, "apps.celery_events_app", "events", tmp_path / "w.log", extra=["-E", "-n", NODE]
        )
    finally:
        os.environ.pop("EVENTS_APP_BROKER", None)
    try:
        with bound(ev.app, dsn):
            results = [ev.add.delay(i, i) for i in range(30)]
            assert [r.get(timeout=60) for r in results] == [i + i for i in range(30)]
        # Postgres still gets every event: the broker's outage is the broker copy's alone
        ids = {r.id for r in results}
        wait_for(
            lambda: ids <= {e["uuid"] for e in stored(dsn, types=["task-succeeded"], limit=10_000)},
            what="the events in Postgres",
        )
        stop(worker)  # no wedge: a dead broker is not waited on at shutdown
        log = worker.output()
        assert log.count("celery_compat.events.broker_unreachable") == 1, log
    except BaseException:
        print(worker.output())
        raise
    finally:
        worker.close()


def test_E_is_refused_for_an_app_of_plain_jobs(dsn: str) -> None:
    import subprocess
    import sys

    from worker_proc import TESTS_DIR

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ujobs_bridge",
            "worker",
            "-A",
            "apps.basic_jobs",
            "-E",
            "--dsn",
            dsn,
        ],
        cwd=TESTS_DIR,
        env={**os.environ, "PYTHONPATH": str(TESTS_DIR)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "task events are Celery's" in done.stderr


def test_celery_worker_E_on_the_bridge_sends_the_events_too(dsn: str, tmp_path: Path) -> None:
    """The real ``celery`` console script: ``celery -A app worker -E -n c1@%h`` runs the bridge
    worker, whose events carry Celery's expanded node name."""
    import subprocess
    import sys

    from worker_proc import TESTS_DIR

    log = (tmp_path / "celery.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR), "UJOBS_DATABASE_URL": dsn}
    env["EVENTS_APP_BROKER"] = ""  # no broker: Postgres only
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "apps.celery_events_app",
            "worker",
            "-E",
            "-n",
            "c1@%h",
            "-Q",
            "events",
            "-l",
            "INFO",
        ],
        cwd=TESTS_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        with bound(ev.app, dsn):
            result = ev.add.delay(20, 22)
            assert result.get(timeout=60) == 42
        node = f"c1@{HOST}"
        done = wait_for(
            lambda: stored(dsn, task_id=result.id, types=["task-succeeded"]), what="the event"
        )
        assert isinstance(done, list) and done[0]["hostname"] == node
        assert stored(dsn, hostname=node, types=["worker-online"])
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    except BaseException:
        print((tmp_path / "celery.log").read_text(errors="replace"))
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
