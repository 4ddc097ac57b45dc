"""Worker nodes of real worker processes: registered at start, renewed by the heartbeat,
deleted on SIGTERM, expired and reaped by another worker's sweep after SIGKILL, each time with
the marks of the queues it waited for (0021); the node name is
what a task reads as ``self.request.hostname``, in a ``--pool processes`` child too."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import psycopg
import pytest
from worker_proc import WorkerProc

from apps import celery_control_app as capp
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from conftest import wait_for
from ujobs_bridge._internal.observe.introspect import Introspector

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
HOST = socket.gethostname()


def rows(dsn: str) -> dict[str, Any]:
    """Every node row, expired or not: name -> heartbeat_at."""
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("select name, heartbeat_at from x_worker_nodes").fetchall())


def waiting(dsn: str) -> set[tuple[str, str]]:
    """(node name, queue) of every queue a worker marked as waited for (migration 0021)."""
    with psycopg.connect(dsn) as conn:
        return set(
            conn.execute(
                "select n.name, w.queue from x_queue_waiters as w"
                " join x_worker_nodes as n on n.worker_id = w.worker_id"
            ).fetchall()
        )


def live(dsn: str) -> set[str]:
    return {n.name for n in Introspector(dsn).nodes()}


def test_nodes_heartbeat_leave_on_sigterm_and_are_reaped_after_sigkill(
    dsn: str, tmp_path: Path
) -> None:
    a = WorkerProc(dsn, "apps.presence_jobs", "basic", tmp_path / "a.log", extra=["-n", "a@%h"])
    b = WorkerProc(dsn, "apps.presence_jobs", "basic", tmp_path / "b.log", extra=["-n", "b@%h"])
    try:
        wait_for(lambda: live(dsn) == {f"a@{HOST}", f"b@{HOST}"}, what="both nodes")
        both = {(f"a@{HOST}", "basic"), (f"b@{HOST}", "basic")}
        wait_for(lambda: waiting(dsn) == both, what="both idle workers waiting for their queue")
        first = rows(dsn)[f"b@{HOST}"]
        wait_for(lambda: rows(dsn)[f"b@{HOST}"] > first, what="b's heartbeat")  # lease 2 s
        a.kill()  # no goodbye: the node expires (lease 2 s), then b's sweep deletes it
        wait_for(lambda: live(dsn) == {f"b@{HOST}"}, what="a's node expired")
        wait_for(lambda: f"a@{HOST}" not in rows(dsn), timeout=40, what="a's node reaped")
        assert waiting(dsn) == {(f"b@{HOST}", "basic")}  # a's mark went with its node
        b.term()
        assert b.wait(timeout=20) == 0
        assert rows(dsn) == {}  # deleted on the way out
        with psycopg.connect(dsn) as conn:  # and its marks with it: inserts wake nobody
            assert conn.execute("select count(*) from x_queue_waiters").fetchone() == (0,)
    except BaseException:
        print(a.output(), b.output())
        raise
    finally:
        a.close()
        b.close()


def test_request_hostname_is_the_node_name_in_a_process_pool_child(
    dsn: str, tmp_path: Path
) -> None:
    worker = WorkerProc(
        dsn, "apps.celery_control_app", "a", tmp_path / "w.log",
        extra=["-n", "p@%h", "--pool", "processes", "-c", "1"],
    )  # fmt: skip
    try:
        with bound(capp.app, dsn):
            assert capp.node.delay().get(timeout=60) == f"p@{HOST}"
            assert capp.app.control.inspect(timeout=5).ping() == {f"p@{HOST}": {"ok": "pong"}}
            limited = capp.app.control.rate_limit(capp.add.name, "1/m", reply=True, timeout=5)
            assert limited == [{f"p@{HOST}": {"ok": "new rate limit set successfully"}}]
            assert capp.add.delay(1, 1).get(timeout=30) == 2
            second = capp.add.delay(2, 2)
            wait_for(lambda: snoozed(dsn, second.id), what="the child honours the new limit")
    except BaseException:
        print(worker.output())
        raise
    finally:
        worker.close()


def snoozed(dsn: str, task_id: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select j.state, j.run_at > now() + interval '20 seconds' from x_jobs j"
            " where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = %s",
            (task_id,),
        ).fetchone()
    return bool(row and row[0] == "ready" and row[1])
