"""Worker presence and remote control at the engine level, on real Postgres with in-process
workers: a node is registered at start and deleted at stop, commands reach the addressed live
nodes and their replies come back in Celery's shapes, and a request nobody answers times out."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from apps import presence_jobs
from conftest import wait_for
from ujobs_bridge import Worker, WorkerConfig
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.db import nodes
from ujobs_bridge._internal.observe.introspect import Introspector
from ujobs_bridge._internal.worker import remote
from ujobs_bridge.client import Client

pytestmark = pytest.mark.timeout(60)


def replies(dsn: str, command: str, **kw: Any) -> dict[str, Any]:
    arguments = kw.pop("arguments", {})
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = remote.broadcast(conn, command, json.dumps(arguments), reply=True, **kw)
    return {r.node: json.loads(r.value_json) for r in got}


@pytest.fixture
def workers(dsn: str) -> Iterator[list[Worker]]:
    jobs = loading.load("apps.presence_jobs")
    built = [
        Worker(dsn, jobs, WorkerConfig(queues=("basic",), concurrency=2), node_name=f"w{i}@box")
        for i in (1, 2)
    ]
    for w in built:
        w.start()
    try:
        yield built
    finally:
        for w in built:
            w.stop(timeout_s=5)


def test_nodes_are_registered_at_start_and_deleted_at_stop(dsn: str, workers: list[Worker]) -> None:
    seen = Introspector(dsn)
    live = {n.name: n for n in seen.nodes()}
    assert set(live) == {"w1@box", "w2@box"}
    assert live["w1@box"].queues == ["basic"] and live["w1@box"].concurrency == 2
    assert (
        live["w1@box"].pool == "threads"
        and "apps.presence_jobs.add" in live["w1@box"].info["registered"]
    )
    assert seen.workers_per_queue() == {"basic": 2}
    workers[0].stop(timeout_s=5)
    assert {n.name for n in seen.nodes()} == {"w2@box"}


def test_ping_reaches_every_live_node_and_a_destination_only_its_node(
    dsn: str, workers: list[Worker]
) -> None:
    pongs = replies(dsn, "ping")
    assert set(pongs) == {"w1@box", "w2@box"}
    assert pongs["w1@box"] == {
        "pong": True, "node": "w1@box", "worker_id": workers[0].id, "pid": os.getpid()
    }  # fmt: skip
    assert set(replies(dsn, "ping", destination=["w2@box"])) == {"w2@box"}
    assert len(replies(dsn, "ping", limit=1)) == 1


def test_control_commands_change_the_worker(dsn: str, workers: list[Worker]) -> None:
    w1 = workers[0]
    one = ["w1@box"]
    assert replies(dsn, "queues", destination=one) == {"w1@box": {"queues": ["basic"]}}
    assert replies(dsn, "consume", destination=one, arguments={"queue": "extra"}) == {
        "w1@box": {"queues": ["basic", "extra"], "changed": True}
    }
    assert w1.queues == ("basic", "extra")
    wait_for(lambda: Introspector(dsn).workers_per_queue().get("extra") == 1, what="node queues")
    assert replies(dsn, "stop_consuming", destination=one, arguments={"queue": "extra"}) == {
        "w1@box": {"queues": ["basic"], "changed": True}
    }
    assert w1.queues == ("basic",)
    last = replies(dsn, "stop_consuming", destination=one, arguments={"queue": "basic"})
    assert last["w1@box"]["error"]["code"] == "UJ_CONTROL_REFUSED"
    assert "only queue" in last["w1@box"]["error"]["message"]
    bad = replies(dsn, "consume", destination=one, arguments={"queue": "no spaces"})
    assert bad["w1@box"]["error"]["code"] == "UJ_QUEUE_NAME_INVALID"
    assert replies(dsn, "pool_grow", destination=one, arguments={"n": 2}) == {"w1@box": {"size": 4}}
    assert w1.config.concurrency == 4
    assert replies(dsn, "pool_shrink", destination=one) == {"w1@box": {"size": 3}}
    assert w1.config.concurrency == 3
    flipped: list[bool] = []
    w1.task_events_hooks.append(flipped.append)
    assert replies(dsn, "task_events", destination=one, arguments={"on": True}) == {
        "w1@box": {"task_events": True, "changed": True}
    }
    assert replies(dsn, "task_events", destination=one, arguments={"on": True}) == {
        "w1@box": {"task_events": True, "changed": False}
    }
    assert w1.send_task_events and flipped == [True]
    assert replies(dsn, "task_events", destination=one, arguments={"on": False}) == {
        "w1@box": {"task_events": False, "changed": True}
    }
    refused = replies(dsn, "autoscale", destination=one, arguments={"max": 4, "min": 1})
    assert refused["w1@box"]["error"]["code"] == "UJ_CONTROL_REFUSED"
    assert "--autoscale" in refused["w1@box"]["error"]["hint"]
    unknown = replies(dsn, "no_such_command", destination=one)["w1@box"]["error"]
    assert unknown["code"] == "UJ_CONTROL_COMMAND_UNKNOWN" and "ping" in unknown["hint"]
    assert replies(dsn, "jobs", destination=one)["w1@box"]["jobs"] == sorted(w1.names)


def test_a_plain_job_worker_has_no_celery_words(dsn: str, workers: list[Worker]) -> None:
    """The engine's default node name is its own, a plain @job worker answers no Celery
    command (it has no command set ``celery``), and its node row says so."""
    jobs = loading.load("apps.presence_jobs")
    assert Worker(dsn, jobs, WorkerConfig(queues=("basic",))).node.startswith("ujobs@")
    assert {n.name: n.info["command_sets"] for n in Introspector(dsn).nodes()} == {
        "w1@box": [], "w2@box": []
    }  # fmt: skip
    started = time.monotonic()
    assert replies(dsn, "celery.ping", timeout=5.0, command_set="celery") == {}
    assert time.monotonic() - started < 4.0  # no node has the set: nobody to wait for
    assert replies(dsn, "celery.ping", timeout=0.5) == {}  # asked anyway: no reply


def test_attempts_and_stats_describe_what_runs(
    dsn: str, client: Client, workers: list[Worker]
) -> None:
    presence_jobs.GATE.clear()
    job_id = presence_jobs.gated.configure(client=client).enqueue(7).id

    def running() -> list[dict[str, Any]]:
        got = replies(dsn, "attempts", arguments={"running": True})
        return [a for answer in got.values() for a in answer["attempts"]]

    wait_for(running, what="the gated job running")
    (attempt,) = running()
    assert (attempt["job_id"], attempt["name"], attempt["queue"], attempt["input"]) == (
        str(job_id), "apps.presence_jobs.gated", "basic", {"args": [7], "kwargs": {}}
    )  # fmt: skip
    assert attempt["running"] is True and attempt["hung"] is False and attempt["attempt"] == 1
    assert attempt["node"] in ("w1@box", "w2@box") and attempt["started_at"] <= time.time()
    assert attempt["deadline_at"] is None or attempt["deadline_at"] > attempt["started_at"]
    waiting = replies(dsn, "attempts", arguments={"running": False})
    assert all(answer == {"attempts": []} for answer in waiting.values())
    by_id = replies(dsn, "attempts", arguments={"job_ids": [str(job_id)]})
    assert sum(len(answer["attempts"]) for answer in by_id.values()) == 1
    presence_jobs.GATE.set()
    wait_for(lambda: not running(), what="nothing running")
    stats = replies(dsn, "stats")
    assert sum(s["processed"].get("apps.presence_jobs.gated", 0) for s in stats.values()) == 1
    one = stats["w1@box"]
    assert one["pool"]["kind"] == "threads" and one["pool"]["size"] == 2
    assert one["node"] == "w1@box" and one["queues"] == ["basic"] and one["autoscale"] is None
    assert one["software"]["name"] == "ujobs-bridge" and one["hung"] == 0


def test_shutdown_gets_no_reply_and_stops_claiming(dsn: str, workers: list[Worker]) -> None:
    assert replies(dsn, "shutdown", destination=["w2@box"], timeout=0.5) == {}
    wait_for(lambda: workers[1].remote_shutdown.is_set(), what="the shutdown request")
    assert workers[1].stopping


def test_no_live_node_answers_at_once_and_a_silent_node_times_out(dsn: str) -> None:
    started = time.monotonic()
    assert replies(dsn, "ping", timeout=5.0) == {}
    assert time.monotonic() - started < 4.0  # nobody to wait for
    with psycopg.connect(dsn, autocommit=True) as conn:  # a node that never answers
        spec = nodes.NodeSpec("ghost:1", "ghost@box", "box", 1, ["basic"], 1, "threads", {})
        nodes.node_register(conn, spec, 60.0, None)
    started = time.monotonic()
    assert replies(dsn, "ping", timeout=0.5) == {}
    assert time.monotonic() - started >= 0.5


def test_a_request_without_reply_is_still_carried_out(dsn: str, workers: list[Worker]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert remote.broadcast(conn, "pool_grow", json.dumps({"n": 1}), reply=False) == []
    wait_for(lambda: all(w.config.concurrency == 3 for w in workers), what="both pools grown")


def test_a_node_whose_connection_is_killed_stays_alive(dsn: str, workers: list[Worker]) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        killed = admin.execute(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity"
            " where datname = current_database() and application_name like %s",
            (f"ujobs:worker:{workers[0].id}%",),
        ).fetchone()
    assert killed and killed[0] >= 2  # its heartbeat/presence and listener connections
    pause = threading.Event()
    deadline = time.monotonic() + 30
    while "w1@box" not in replies(dsn, "ping", timeout=1.0):
        assert time.monotonic() < deadline, "w1 never answered again"
        pause.wait(0.2)
    assert {n.name for n in Introspector(dsn).nodes()} == {"w1@box", "w2@box"}
