"""Celery's events at run time: the on/off switch remote control flips (task events stop and start,
the heartbeat goes on), ``task-sent`` at ``.delay()`` with ``task_send_sent_event``, and a
``--pool processes`` worker whose children send task events for the worker's node."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from events_support import BROKER, captured, redis_or_skip
from worker_proc import WorkerProc

from apps import celery_events_app as ev
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    worker,
)
from celery_compat.events import log as event_log
from celery_compat.events import switch as event_switch
from celery_compat.events import worker_events
from celery_compat.events.emitter import close_emitter
from conftest import wait_for

pytestmark = [pytest.mark.timeout(120)]

HOST = socket.gethostname()


def stored(dsn: str, **filters: Any) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return event_log.read(conn, limit=10_000, **filters)


@pytest.fixture
def events_app() -> Iterator[Any]:
    yield ev.app
    close_emitter(ev.app)  # this process's emitter follows the test's database
    event_switch.release()
    event_switch.set_enabled(False)


def test_the_switch_stops_and_restarts_task_events_while_the_heartbeat_goes_on(
    dsn: str, events_app: Any
) -> None:
    node = f"switch@{HOST}"
    options = {"task_events": True, "heartbeat_interval": 0.3}
    with bound(events_app, dsn), worker(events_app, dsn, queues=("events",), start=False) as w:
        events = worker_events.start(events_app, w, options, node, dsn)
        assert events is not None and event_switch.enabled()
        w.start()
        events.ready()
        try:
            first = ev.add.delay(1, 2)
            assert first.get(timeout=30) == 3
            wait_for(lambda: stored(dsn, task_id=first.id, types=["task-succeeded"]), what="on")

            event_switch.set_enabled(False)  # what `disable_events` calls
            second = ev.add.delay(2, 2)
            assert second.get(timeout=30) == 4
            mark = stored(dsn)[-1]["id"]
            # a heartbeat after the task ran: anything the task sent is stored before it
            wait_for(
                lambda: stored(dsn, after_id=mark, hostname=node, types=["worker-heartbeat"]),
                what="a heartbeat while task events are off",
            )
            assert stored(dsn, task_id=second.id) == []

            event_switch.set_enabled(True)  # what `enable_events` calls
            third = ev.add.delay(3, 3)
            assert third.get(timeout=30) == 6
            wait_for(lambda: stored(dsn, task_id=third.id, types=["task-succeeded"]), what="on")
        finally:
            events.shutdown()
    assert stored(dsn, hostname=node, types=["worker-offline"])
    assert [e["type"] for e in stored(dsn, hostname=node, types=["worker-online"])] == [
        "worker-online"
    ]


def test_task_sent_is_sent_at_delay_with_task_send_sent_event(dsn: str, events_app: Any) -> None:
    redis_or_skip()
    events_app.conf.task_send_sent_event = True
    try:
        with captured(events_app) as capture, bound(events_app, dsn):
            result = ev.add.delay(4, 5)
            sent = capture.one("task-sent", uuid=result.id)
    finally:
        events_app.conf.task_send_sent_event = False
    assert sent["name"] == ev.add.name and sent["hostname"] == f"gen{os.getpid()}@{HOST}"
    assert (sent["args"], sent["kwargs"], sent["retries"]) == ("(4, 5)", "{}", 0)
    assert (sent["eta"], sent["expires"], sent["parent_id"]) == (None, None, None)
    assert sent["root_id"] == result.id and sent["pid"] == os.getpid()
    assert sent["queue"] == "events" and sent["routing_key"] == "events"
    assert "exchange" in sent
    in_pg = wait_for(lambda: stored(dsn, task_id=result.id, types=["task-sent"]), what="stored")
    assert isinstance(in_pg, list) and in_pg[0]["name"] == ev.add.name


@pytest.mark.slow
def test_pool_children_send_task_events_for_the_workers_node(dsn: str, tmp_path: Path) -> None:
    os.environ["EVENTS_APP_BROKER"] = BROKER
    try:
        proc = WorkerProc(
            dsn,
            "apps.celery_events_app",
            "events",
            tmp_path / "w.log",
            extra=["-E", "-P", "processes", "-c", "2", "-n", "pool@%h"],
        )
    finally:
        os.environ.pop("EVENTS_APP_BROKER", None)
    try:
        with bound(ev.app, dsn):
            results = [ev.add.delay(i, 1) for i in range(6)]
            assert [r.get(timeout=60) for r in results] == [i + 1 for i in range(6)]
        ids = {r.id for r in results}

        def succeeded() -> list[dict[str, Any]]:
            found = [e for e in stored(dsn, types=["task-succeeded"]) if e["uuid"] in ids]
            return found if len(found) == len(ids) else []

        done = wait_for(succeeded, what="every task's task-succeeded from the children")
        assert isinstance(done, list)
        # from the children (the worker's main process runs no body), for the node and main pid
        assert {(e["hostname"], e["pid"]) for e in done} == {(f"pool@{HOST}", proc.pid)}
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    except BaseException:
        print(proc.output())
        raise
    finally:
        proc.close()


@pytest.mark.slow
def test_remote_disable_and_enable_events_reach_a_running_worker(dsn: str, tmp_path: Path) -> None:
    node = f"ctl@{HOST}"
    os.environ["EVENTS_APP_BROKER"] = ""  # Postgres only
    try:
        proc = WorkerProc(
            dsn, "apps.celery_events_app", "events", tmp_path / "w.log", extra=["-E", "-n", node]
        )
    finally:
        os.environ.pop("EVENTS_APP_BROKER", None)
    try:
        wait_for(lambda: stored(dsn, hostname=node, types=["worker-online"]), what="online")
        with bound(ev.app, dsn):
            control = ev.app.control
            assert control.disable_events(reply=True, destination=[node], timeout=10) == [
                {node: {"ok": "task events disabled"}}
            ]
            quiet = ev.add.delay(1, 1)
            assert quiet.get(timeout=30) == 2
            mark = stored(dsn)[-1]["id"]
            wait_for(
                lambda: stored(dsn, after_id=mark, hostname=node, types=["worker-heartbeat"]),
                what="a heartbeat while task events are off",
            )
            assert stored(dsn, task_id=quiet.id) == []
            assert control.enable_events(reply=True, destination=[node], timeout=10) == [
                {node: {"ok": "task events enabled"}}
            ]
            loud = ev.add.delay(2, 2)
            assert loud.get(timeout=30) == 4
        wait_for(lambda: stored(dsn, task_id=loud.id, types=["task-succeeded"]), what="on again")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    except BaseException:
        print(proc.output())
        raise
    finally:
        proc.close()
