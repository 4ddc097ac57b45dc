"""Flower 2.x, real and unchanged, started against the cutover broker (Redis db 3) as a Celery team
starts it (``celery --broker=... flower``), shows the bridge worker (``ujobs-bridge worker -E``)
and the tasks it ran, with their states, read through Flower's HTTP API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from events_support import BROKER, redis_or_skip
from worker_proc import TESTS_DIR, WorkerProc

from apps import celery_events_app as ev
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from conftest import wait_for

pytest.importorskip("flower")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NODE = f"fl1@{socket.gethostname()}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Flower:
    def __init__(self, log: Path, *, broker: str = BROKER, inspect_timeout_ms: int = 100) -> None:
        self.port = free_port()
        self.log = log
        self._out = log.open("w")
        env = {**os.environ, "FLOWER_UNAUTHENTICATED_API": "true"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                f"--broker={broker}",
                "flower",
                f"--port={self.port}",
                "--address=127.0.0.1",
                f"--inspect_timeout={inspect_timeout_ms}",
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=TESTS_DIR,
            start_new_session=True,
        )

    def get(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
        return json.loads(body) if body.startswith(("{", "[")) else body

    def post(self, path: str, form: dict[str, str] | None = None) -> tuple[int, Any]:
        """POST ``form`` (urlencoded) to Flower's API: (status, decoded body)."""
        url = f"http://127.0.0.1:{self.port}{path}"
        data = urllib.parse.urlencode(form or {}).encode()
        try:
            with urllib.request.urlopen(url, data=data, timeout=30) as response:
                return response.status, json.loads(response.read().decode() or "null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def healthy(self) -> bool:
        with contextlib.suppress(OSError, urllib.error.URLError):
            return bool(self.get("/healthcheck") == "OK")
        return False

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._out.close()


@pytest.fixture
def flower(tmp_path: Path) -> Iterator[Flower]:
    redis_or_skip()
    running = Flower(tmp_path / "flower.log")
    try:
        wait_for(running.healthy, timeout=60, what="Flower to answer")
        yield running
    except BaseException:
        print(running.log.read_text(errors="replace"))
        raise
    finally:
        running.close()


@pytest.fixture
def broker_env() -> Iterator[None]:
    os.environ["EVENTS_APP_BROKER"] = BROKER
    yield
    os.environ.pop("EVENTS_APP_BROKER", None)


def test_flower_lists_the_bridge_worker_and_the_tasks_it_ran(
    dsn: str, tmp_path: Path, flower: Flower, broker_env: None
) -> None:
    worker = WorkerProc(
        dsn, "apps.celery_events_app", "events", tmp_path / "w.log", extra=["-E", "-n", "fl1@%h"]
    )
    try:
        # Flower's worker list, from the events (heartbeats): the bridge node, alive
        wait_for(
            lambda: flower.get("/api/workers?status=true").get(NODE) is True,
            timeout=60,
            what="Flower to list the bridge worker as online",
        )
        with bound(ev.app, dsn):
            added = ev.add.delay(2, 3)
            assert added.get(timeout=30) == 5
            failed = ev.boom.delay("no luck")
            with pytest.raises(ValueError):
                failed.get(timeout=30)
            retried = ev.flaky.delay()
            assert retried.get(timeout=30) == "second time"

        def tasks() -> dict[str, Any]:
            found: dict[str, Any] = flower.get("/api/tasks")
            return found

        def settled() -> bool:
            seen = tasks()
            return all(
                seen.get(r.id, {}).get("state") in ("SUCCESS", "FAILURE")
                for r in (added, failed, retried)
            )

        wait_for(settled, timeout=60, what="Flower to show the three tasks finished")
        seen = tasks()
        add, boom, flaky = seen[added.id], seen[failed.id], seen[retried.id]
        assert (add["name"], add["state"], add["worker"]) == (ev.add.name, "SUCCESS", NODE)
        assert (add["args"], add["kwargs"], add["result"]) == ("(2, 3)", "{}", "5")
        assert add["received"] <= add["started"] <= add["succeeded"]
        assert add["runtime"] >= 0
        assert (boom["state"], boom["worker"]) == ("FAILURE", NODE)
        assert boom["exception"] == "ValueError('no luck')"
        assert flaky["state"] == "SUCCESS" and flaky["retries"] == 1

        # one task's page, and Flower's tasks filtered by worker and by state
        info = flower.get(f"/api/task/info/{added.id}")
        assert (info["state"], info["worker"], info["result"]) == ("SUCCESS", NODE, "5")
        by_state = flower.get(f"/api/tasks?workername={NODE}&state=FAILURE")
        assert set(by_state) == {failed.id}

        # the workers dashboard's data: the node, its counts of task events
        dashboard = {w["hostname"]: w for w in flower.get("/workers?json=1")["data"]}
        node = dashboard[NODE]
        assert node["status"] is True and node["sw_ident"] == "py-celery"
        assert node.get("task-succeeded", 0) >= 2 and node.get("task-failed", 0) >= 1

        worker.term()  # worker-offline: Flower shows it offline at once
        assert worker.wait(timeout=30) == 0
        wait_for(
            lambda: flower.get("/api/workers?status=true").get(NODE) is False,
            timeout=30,
            what="Flower to show the worker offline",
        )
    except BaseException:
        print(worker.output())
        raise
    finally:
        worker.close()
