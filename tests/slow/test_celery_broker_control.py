"""Remote control over the cutover broker: a bridge worker whose app still names a broker answers
Celery's pidbox there, with the same handlers as over Postgres, so an unchanged Flower 2.x
(``celery --broker=redis://... flower``, no app) lists it with its stats, registered tasks and
queues and its buttons act on it, and ``celery --broker=... inspect|control`` (no app either)
reaches it. A broker that goes away and comes back costs the worker nothing; the mailbox is
back once the broker is. Real Redis (db 15: this branch's), real Flower, real worker processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import celery
import pytest
import redis
from celery.exceptions import TaskRevokedError
from tcp_cut import TcpCut
from test_celery_events_flower import Flower
from worker_proc import TESTS_DIR, WorkerProc

from apps import celery_events_app as ev
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from celery_compat import Celery as BridgeCelery
from celery_compat.control import broker as broker_control
from conftest import wait_for
from ujobs_bridge.testing import redis_url

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REDIS_DB = 15
BROKER = redis_url(REDIS_DB)
HOST = socket.gethostname()


def _redis_or_skip() -> None:
    try:
        redis.Redis.from_url(BROKER, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis at {BROKER}: {exc}")


def _worker(dsn: str, log: Path, name: str, broker: str = BROKER) -> WorkerProc:
    os.environ["EVENTS_APP_BROKER"] = broker
    try:
        return WorkerProc(
            dsn, "apps.celery_events_app", "events", log, extra=["-n", f"{name}@%h", "-c", "2"]
        )
    finally:
        os.environ.pop("EVENTS_APP_BROKER", None)


class CeleryBeside:
    """A real ``celery worker`` of a plain Celery app on the same broker (its own queue)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._out = log.open("w")
        env = {**os.environ, "BESIDE_TEST_BROKER": BROKER}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "apps.celery_beside_worker", "worker",
             "-P", "solo", "-n", f"beside@{HOST}", "-l", "INFO", "--without-gossip"],
            stdout=self._out, stderr=subprocess.STDOUT, env=env, cwd=TESTS_DIR,
            start_new_session=True,
        )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        wait_for(lambda: " ready." in self.output(), timeout=60, what="the Celery worker ready")

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._out.close()


def celery_broker(*args: str) -> subprocess.CompletedProcess[str]:
    """The real ``celery`` console script on the broker alone (no app, as an operator runs it)."""
    return subprocess.run(
        [sys.executable, "-m", "celery", f"--broker={BROKER}", *args],
        cwd=TESTS_DIR, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def flower(tmp_path: Path) -> Iterator[Flower]:
    _redis_or_skip()
    running = Flower(tmp_path / "flower.log", broker=BROKER, inspect_timeout_ms=5000)
    try:
        wait_for(running.healthy, timeout=60, what="Flower to answer")
        yield running
    except BaseException:
        print(running.log.read_text(errors="replace"))
        raise
    finally:
        running.close()


def test_flower_shows_the_bridge_workers_stats_and_its_buttons_act(
    dsn: str, tmp_path: Path, flower: Flower
) -> None:
    node = f"fc1@{HOST}"
    worker = _worker(dsn, tmp_path / "w.log", "fc1")
    beside: CeleryBeside | None = None
    try:

        def listed() -> dict[str, Any] | None:
            info: dict[str, Any] = flower.get("/api/workers?refresh=1").get(node) or {}
            return info if {"stats", "registered", "active_queues"} <= set(info) else None

        info = wait_for(listed, timeout=60, what="Flower to list the bridge worker with stats")
        # a real Celery worker starts beside it (ready below): its Mingle step asks for `hello`
        beside = CeleryBeside(tmp_path / "beside.log")
        assert isinstance(info, dict)
        stats = info["stats"]
        assert stats["pid"] == worker.pid and stats["pool"]["max-concurrency"] == 2
        assert stats["sw_ident"] == "ujobs-bridge" and "rusage" in stats
        assert ev.add.name in info["registered"]
        assert [q["name"] for q in info["active_queues"]] == ["events"]
        # one worker's page: its task lists and configuration too
        one = flower.get(f"/api/workers?refresh=1&workername={node}")[node]
        assert (one["scheduled"], one["active"], one["reserved"]) == ([], [], [])
        assert one["conf"]["task_default_queue"] == "events"

        # Flower's "pool grow" button: the worker's pool grows, as Postgres remote control sees
        status, body = flower.post(f"/api/worker/pool/grow/{node}?n=1")
        assert (status, body) == (200, {"message": f"Growing '{node}' worker's pool by 1"})
        with bound(ev.app, dsn):
            inspect = ev.app.control.inspect(destination=[node], timeout=5)
            assert inspect.stats()[node]["pool"]["max-concurrency"] == 3

            # `celery --broker=... control rate_limit` (no app): the worker's task changes
            limited = celery_broker("control", "rate_limit", ev.add.name, "10/m", "-d", node)
            assert limited.returncode == 0, limited.stderr
            assert f"->  {node}: OK\n        new rate limit set successfully" in limited.stdout
            assert f"{ev.add.name} [rate_limit=10/m]" in inspect.registered()[node]

        shown = celery_broker("inspect", "stats", "-d", node, "--timeout", "5")
        assert shown.returncode == 0, shown.stderr
        assert f"->  {node}: OK" in shown.stdout and '"max-concurrency": 3' in shown.stdout

        with bound(ev.app, dsn):
            inspect = ev.app.control.inspect(destination=[node], timeout=5)
            # Flower's "revoke" button (terminate=false): recorded, listed, never run
            later = ev.add.apply_async((1, 1), countdown=3600)
            status, body = flower.post(f"/api/task/revoke/{later.id}", {"terminate": "false"})
            assert (status, body) == (200, {"message": f"Revoked '{later.id}'"})
            wait_for(
                lambda: later.id in (inspect.revoked() or {}).get(node, []),
                what="inspect revoked to list the task Flower revoked",
            )
            assert later.state == "REVOKED"

            # Flower's "terminate" button: the running task stops and reads REVOKED
            napping = ev.nap.delay(120)
            wait_for(
                lambda: napping.id in {a["id"] for a in (inspect.active() or {}).get(node, [])},
                what="the nap to run",
            )
            form = {"terminate": "true", "signal": "SIGKILL"}
            status, body = flower.post(f"/api/task/revoke/{napping.id}", form)
            assert (status, body) == (200, {"message": f"Revoked '{napping.id}'"})
            with pytest.raises(TaskRevokedError):
                napping.get(timeout=30)
            assert napping.id in inspect.revoked()[node]

        # a real Celery worker starting beside it: its Mingle `hello` is answered, no ERROR
        assert beside is not None
        beside.wait_ready()
        assert "mingle: sync with 1 nodes" in beside.output(), beside.output()

        # Flower's "shut down" button: the worker drains and exits as on SIGTERM
        status, body = flower.post(f"/api/worker/shutdown/{node}")
        assert (status, body) == (200, {"message": "Shutting down!"})
        assert worker.wait(timeout=60) == 0
        assert "celery_compat.control.broker_listening" in worker.output()
        assert "pidbox command error" not in worker.output()
        assert [line for line in worker.output().splitlines() if " ERROR " in line] == []
    except BaseException:
        print(worker.output())
        if beside is not None:
            print(beside.output())
        raise
    finally:
        worker.close()
        if beside is not None:
            beside.close()


def _broker_pong(node: str) -> bool:
    """``ping`` over the broker (a plain Celery client, as Flower's), answered by ``node``?"""
    client = celery.Celery(broker=BROKER)  # plain Celery: remote control over the broker
    try:
        replies = client.control.ping(destination=[node], timeout=1)
    finally:
        client.close()
    return bool(replies) and replies[0].get(node) == {"ok": "pong"}


def test_a_broker_outage_costs_the_worker_nothing_and_the_mailbox_comes_back(
    dsn: str, tmp_path: Path
) -> None:
    _redis_or_skip()
    node = f"fc2@{HOST}"
    relay = TcpCut(
        urlsplit(BROKER).port or 6379
    )  # the worker reaches Redis through it; the test's client does not
    worker = _worker(
        dsn,
        tmp_path / "w.log",
        "fc2",
        broker=f"redis://127.0.0.1:{relay.port}/{urlsplit(BROKER).path.strip('/') or 0}",
    )
    try:
        wait_for(lambda: _broker_pong(node), timeout=60, what="the node on the broker")
        relay.cut()
        wait_for(
            lambda: "celery_compat.control.broker_unreachable" in worker.output(),
            timeout=60,
            what="the outage noticed",
        )
        assert not _broker_pong(node)
        with bound(ev.app, dsn):  # the worker goes on: tasks run, Postgres control answers
            assert ev.add.delay(2, 2).get(timeout=30) == 4
            assert ev.app.control.ping(destination=[node], timeout=5) == [{node: {"ok": "pong"}}]
        relay.restore()
        wait_for(lambda: _broker_pong(node), timeout=60, what="the node back on the broker")
        worker.term()
        assert worker.wait(timeout=60) == 0
        log = worker.output()
        assert log.count("celery_compat.control.broker_unreachable") == 1, log
        assert log.count("celery_compat.control.broker_reachable") == 1, log
    except BaseException:
        print(worker.output())
        raise
    finally:
        relay.close()
        worker.close()


@pytest.mark.parametrize(
    ("conf", "answers"),
    [
        ({}, False),  # no broker: Postgres remote control only
        ({"broker_url": BROKER}, True),
        ({"broker_url": BROKER, "worker_enable_remote_control": False}, False),
        ({"broker_read_url": BROKER, "broker_write_url": BROKER}, True),
    ],
)
def test_the_broker_mailbox_runs_only_for_a_cutover_app_that_keeps_remote_control(
    conf: dict[str, Any], answers: bool
) -> None:
    app = BridgeCelery("cutover_check")
    app.conf.update(conf)
    assert broker_control.wanted(app) is answers
