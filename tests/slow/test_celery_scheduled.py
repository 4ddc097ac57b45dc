"""``inspect scheduled`` on a bridge fleet: the Celery messages waiting in Postgres for their eta
or countdown, listed by the live workers consuming their queue, each by exactly one, in Celery's
reply shape, through ``app.control.inspect()`` and the real ``celery inspect scheduled``; and the
statement behind it (one reporting node per queue, a bounded page after a keyset)."""

from __future__ import annotations

import json
import socket
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_celery_control import W1, W2, CeleryWorker, celery, live

from apps import celery_control_app as capp
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from celery_compat.db import scheduled as scheduled_db
from conftest import wait_for
from ujobs_bridge._internal.db import nodes

pytestmark = [pytest.mark.timeout(180)]

INFO_KEYS = {
    "id",
    "name",
    "args",
    "kwargs",
    "type",
    "hostname",
    "time_start",
    "acknowledged",
    "delivery_info",
    "worker_pid",
}  # fmt: skip  (Celery's Request.info())


def _node(worker_id: str, queues: list[str]) -> nodes.NodeSpec:
    return nodes.NodeSpec(worker_id, worker_id, socket.gethostname(), 1, queues, 1, "threads", {})


def test_the_statement_names_one_reporting_node_per_queue_and_pages_by_keyset(dsn: str) -> None:
    eta = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    with bound(capp.app, dsn) as client:
        later = [capp.add.apply_async((i, i), eta=eta + timedelta(seconds=i)) for i in range(5)]
        urgent = capp.add.apply_async((9, 9), eta=eta + timedelta(seconds=2), priority=7)
        capp.add.delay(0, 0)  # due now: reserved or ready, not scheduled
        capp.mul.apply_async((2, 2), countdown=3600)  # queue b
        with client.pool.connection() as conn:
            nodes.node_register(conn, _node("w-b", ["a", "b"]), 60, None)

            def page(worker_id: str, queues: list[str], **kw: Any) -> list[Any]:
                return scheduled_db.scheduled(conn, worker_id=worker_id, queues=queues, **kw)

            rows = page("w-b", ["a"], limit=100)
            ids = [r.input["headers"]["id"] for r in rows]
            # run_at order across priorities (the loose scan merges them), then the job id
            assert ids[:2] == [later[0].id, later[1].id]
            assert set(ids[2:4]) == {later[2].id, urgent.id}
            assert Counter(ids) == Counter([r.id for r in later] + [urgent.id])
            assert [r.run_at for r in rows] == sorted(r.run_at for r in rows)
            assert {r.priority for r in rows} == {0, 7}
            # a page of two, then the next after its last row: the same rows, in order
            first = page("w-b", ["a"], limit=2)
            second = page("w-b", ["a"], limit=2, after=(first[-1].run_at, first[-1].id))
            assert [r.id for r in first + second] == [r.id for r in rows[:4]]
            # a live node consuming `a` whose worker_id sorts first reports `a`; `b` stays ours
            nodes.node_register(conn, _node("w-a", ["a", "c"]), 60, None)
            assert page("w-b", ["a"], limit=100) == []
            assert [r.queue for r in page("w-b", ["a", "b"], limit=100)] == ["b"]
            assert len(page("w-a", ["a", "c"], limit=100)) == 6
            # an expired node reports nothing, nor does a worker with no live node: the next
            # live one in order does
            expired = datetime.now(UTC) - timedelta(hours=1)
            nodes.node_register(conn, _node("w-0", ["a"]), 60, expired)
            assert page("w-0", ["a"], limit=100) == [] and page("w-x", ["a"], limit=100) == []
            assert len(page("w-b", ["a", "b"], limit=100)) == 1
            assert len(page("w-a", ["a"], limit=100)) == 6
            # in an hour and a second, they are all due: nothing is scheduled any more
            assert page("w-a", ["a"], limit=100, now=eta + timedelta(seconds=10)) == []


def _entries(replies: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [entry for node in sorted(replies) for entry in replies[node]]


@pytest.mark.slow
def test_two_bridge_workers_list_each_scheduled_task_once(dsn: str, tmp_path: Path) -> None:
    workers = [CeleryWorker(dsn, n, tmp_path / f"{n}.log") for n in ("w1", "w2")]
    try:
        with bound(capp.app, dsn):
            wait_for(lambda: live(dsn) == {W1, W2}, timeout=60, what="both nodes registered")
            inspect = capp.app.control.inspect(timeout=5)
            assert inspect.scheduled() == {W1: [], W2: []}
            eta = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
            on_a = [capp.add.apply_async((i, 1), eta=eta) for i in range(3)]
            on_b = capp.mul.apply_async((6, 7), countdown=600, priority=3)
            capp.add.apply_async((5, 5), countdown=600, queue="nobody")  # no worker consumes it
            ran = capp.add.delay(1, 1)
            assert ran.get(timeout=30) == 2  # a due message runs; it is never listed

            replies = inspect.scheduled()
            assert set(replies) == {W1, W2}
            entries = _entries(replies)
            ids = Counter(e["request"]["id"] for e in entries)
            assert ids == Counter([r.id for r in on_a] + [on_b.id])  # each once, over the fleet
            by_id = {e["request"]["id"]: (node, e) for node in replies for e in replies[node]}
            node, first = by_id[on_a[0].id]
            assert set(first) == {"eta", "priority", "request"}
            assert datetime.fromisoformat(first["eta"]) == eta
            request = first["request"]
            assert set(request) == INFO_KEYS
            assert (request["name"], request["type"]) == (capp.add.name, capp.add.name)
            assert (request["args"], request["kwargs"], request["hostname"]) == ([0, 1], {}, node)
            assert (request["time_start"], request["acknowledged"]) == (None, False)
            assert request["worker_pid"] is None
            assert request["delivery_info"]["routing_key"] == "a"
            assert by_id[on_b.id][1]["priority"] == 3
            assert by_id[on_b.id][1]["request"]["delivery_info"]["routing_key"] == "b"

            # the console script, as Celery prints it and as JSON
            shown = celery(dsn, "inspect", "scheduled")
            assert shown.returncode == 0, shown.stderr
            for node in (W1, W2):
                assert f"->  {node}: OK" in shown.stdout
            for entry in entries:  # one `* {entry}` line each, under its node
                assert shown.stdout.count(f"* {entry}") == 1
            assert shown.stdout.rstrip().endswith("2 nodes online.")
            as_json = celery(dsn, "inspect", "scheduled", "--json")
            assert as_json.returncode == 0, as_json.stderr
            parsed = json.loads(as_json.stdout)
            assert Counter(e["request"]["id"] for e in _entries(parsed)) == ids

            # a revoked message is no longer waiting; one worker gone: the other lists the rest
            capp.app.control.revoke(on_a[2].id)
            assert workers[0].term() == 0
            wait_for(lambda: live(dsn) == {W2}, what="w1 gone")
            left = capp.app.control.inspect(timeout=5).scheduled()
            assert set(left) == {W2}
            assert Counter(e["request"]["id"] for e in left[W2]) == Counter(
                [on_a[0].id, on_a[1].id, on_b.id]
            )
    except BaseException:
        for w in workers:
            print(w.log.read_text())
        raise
    finally:
        for w in workers:
            w.close()
