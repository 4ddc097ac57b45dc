"""Remote control over Postgres as Celery users meet it: the real ``celery`` console script
(``inspect``, ``status``, ``control``, ``purge``) against two running bridge workers started by
``celery -A proj worker``, ``app.control`` from Python with Celery's reply shapes, and the
command's words when no worker runs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from worker_proc import TESTS_DIR

from apps import celery_control_app as capp
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from conftest import wait_for
from ujobs_bridge._internal.observe.introspect import Introspector

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
HOST = socket.gethostname()
W1, W2 = f"w1@{HOST}", f"w2@{HOST}"
APP = "apps.celery_control_app"


def _env(dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    env["CELERY_CLI_TEST_DSN"] = dsn
    env.pop("UJOBS_DATABASE_URL", None)  # the app's ujobs_database_url names the database
    return env


def celery(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``celery`` console script (``python -m celery``) on the test app."""
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", APP, *args],
        env=_env(dsn), cwd=TESTS_DIR, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def live(dsn: str) -> set[str]:
    return {n.name for n in Introspector(dsn).nodes()}


class CeleryWorker:
    def __init__(self, dsn: str, name: str, log: Path) -> None:
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", APP, "worker", "-l", "INFO", "-c", "2",
             "-Q", "a,b", "-n", f"{name}@%h"],
            stdout=self._out, stderr=subprocess.STDOUT, env=_env(dsn), cwd=TESTS_DIR,
            start_new_session=True,
        )  # fmt: skip

    def term(self) -> int:
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._out.close()


@pytest.fixture
def two(dsn: str, tmp_path: Path) -> Iterator[list[CeleryWorker]]:
    workers = [CeleryWorker(dsn, n, tmp_path / f"{n}.log") for n in ("w1", "w2")]
    try:
        with bound(capp.app, dsn):
            wait_for(lambda: live(dsn) == {W1, W2}, timeout=60, what="both nodes registered")
            yield workers
    except BaseException:
        for w in workers:
            print(w.log.read_text())
        raise
    finally:
        for w in workers:
            w.close()


def test_the_celery_cli_inspects_and_controls_two_bridge_workers(
    dsn: str, two: list[CeleryWorker], tmp_path: Path
) -> None:
    ping = celery(dsn, "inspect", "ping")
    assert ping.returncode == 0, ping.stderr
    for node in (W1, W2):
        assert f"->  {node}: OK\n        pong" in ping.stdout
    assert ping.stdout.rstrip().endswith("2 nodes online.")

    status = celery(dsn, "status")
    assert status.returncode == 0, status.stderr
    assert f"->  {W1}: OK" in status.stdout and f"->  {W2}: OK" in status.stdout
    assert status.stdout.rstrip().endswith("2 nodes online.")

    registered = celery(dsn, "inspect", "registered", "-d", W1)
    assert registered.returncode == 0, registered.stderr
    assert "* apps.celery_control_app.add\n" in registered.stdout
    assert "* apps.celery_control_app.mul [rate_limit=100/s]" in registered.stdout
    assert registered.stdout.rstrip().endswith("1 node online.")

    gate = tmp_path / "open"
    held = capp.hold.delay(str(gate))
    wait_for(lambda: held.id in celery(dsn, "inspect", "active").stdout, what="hold active")
    active = celery(dsn, "inspect", "active").stdout
    assert "apps.celery_control_app.hold" in active and "empty" in active  # one busy, one idle
    gate.touch()
    assert held.get(timeout=30) == str(gate)
    assert capp.node.delay().get(timeout=30) in (W1, W2)  # self.request.hostname: the node

    limited = celery(dsn, "control", "rate_limit", "apps.celery_control_app.add", "1/m")
    assert limited.returncode == 0, limited.stderr
    assert limited.stdout.count("new rate limit set successfully") == 2
    first, second = capp.add.delay(1, 2), capp.add.delay(3, 4)
    # two workers claim at once, so either send may take the fleet's one token: one runs, the
    # other is snoozed by the new limit (a minute), whichever order the claims landed in
    wait_for(lambda: first.ready() or second.ready(), timeout=30, what="one add ran")
    ran, held_back = (first, second) if first.ready() else (second, first)
    assert ran.get(timeout=5) in (3, 7)
    wait_for(lambda: snoozed(dsn, held_back.id), what="the other add snoozed by the new limit")
    assert not held_back.ready()

    for _ in range(3):
        capp.add.apply_async((1, 1), queue="nobody")
    purged = celery(dsn, "purge", "-f", "-Q", "nobody")
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.strip() == "Purged 3 messages from 1 known task queue."
    again = celery(dsn, "purge", "-f", "-Q", "nobody")
    assert again.stdout.strip() == "No messages purged from 1 queue."

    assert two[1].term() == 0
    assert live(dsn) == {W1}  # deleted on a clean exit
    status = celery(dsn, "status")
    assert status.stdout.rstrip().endswith("1 node online.") and W2 not in status.stdout


def snoozed(dsn: str, task_id: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select j.state, j.run_at from x_jobs j where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = %s",
            (task_id,),
        ).fetchone()
    return bool(row and row[0] == "ready" and row[1] > datetime.now(UTC) + timedelta(seconds=20))


def test_app_control_answers_with_celerys_shapes(dsn: str, two: list[CeleryWorker]) -> None:
    control = capp.app.control
    pongs = control.ping(timeout=5)
    assert sorted(pongs, key=lambda r: next(iter(r))) == [
        {W1: {"ok": "pong"}},
        {W2: {"ok": "pong"}},
    ]
    assert control.inspect(timeout=5).ping() == {W1: {"ok": "pong"}, W2: {"ok": "pong"}}
    assert control.inspect(destination=[W2], timeout=5).ping() == {W2: {"ok": "pong"}}
    assert len(control.ping(timeout=5, limit=1)) == 1
    queues = control.inspect(timeout=5).active_queues()
    assert [q["name"] for q in queues[W1]] == ["a", "b"]
    stats = control.inspect(destination=[W1], timeout=5).stats()
    assert stats[W1]["pool"]["max-concurrency"] == 2 and "total" in stats[W1]
    assert control.inspect(timeout=5).scheduled() == {W1: [], W2: []}
    assert control.inspect(timeout=5).reserved() == {W1: [], W2: []}
    report = control.inspect(destination=[W1], timeout=5).report()
    assert "celery" in report[W1]["ok"]
    conf = control.inspect(destination=[W1], timeout=5).conf()
    assert conf[W1]["task_default_queue"] == "a"
    limits = control.time_limit(capp.add.name, soft=5, hard=10, reply=True, timeout=5)
    assert sorted(limits, key=lambda r: next(iter(r))) == [
        {W1: {"ok": "time limits set successfully"}},
        {W2: {"ok": "time limits set successfully"}},
    ]
    assert control.rate_limit("no.such.task", "1/s", reply=True, timeout=5, destination=[W1]) == [
        {W1: {"error": "unknown task"}}
    ]
    assert control.add_consumer("c", reply=True, destination=[W1], timeout=5) == [
        {W1: {"ok": "add consumer c"}}
    ]
    wait_for(lambda: Introspector(dsn).workers_per_queue().get("c") == 1, what="w1 on queue c")
    assert control.cancel_consumer("c", reply=True, destination=[W1], timeout=5) == [
        {W1: {"ok": "no longer consuming from c"}}
    ]
    assert control.enable_events(reply=True, destination=[W1], timeout=5) == [
        {W1: {"ok": "task events enabled"}}
    ]
    assert control.autoscale(4, 1, reply=True, destination=[W1], timeout=5) == [
        {W1: {"error": "ValueError('Autoscale not enabled')"}}
    ]
    assert control.broadcast("nope", reply=True, destination=[W1], timeout=5) == [
        {W1: {"error": "KeyError('nope')"}}
    ]
    assert control.pool_grow(1, reply=True, destination=[W1], timeout=5) == [
        {W1: {"ok": "pool will grow"}}
    ]  # the prefork pool too: a third child is spawned
    wait_for(
        lambda: (
            len(control.inspect(destination=[W1], timeout=5).stats()[W1]["pool"]["processes"]) == 3
        ),
        timeout=60,
        what="w1's third pool child",
    )
    assert control.pool_shrink(1, reply=True, destination=[W1], timeout=5) == [
        {W1: {"ok": "pool will shrink"}}
    ]
    pool = control.inspect(destination=[W1], timeout=5).stats()[W1]["pool"]
    assert pool["max-concurrency"] == 2
    assert control.add_consumer("d", destination=[W1]) is None  # no reply asked: none waited for
    wait_for(lambda: Introspector(dsn).workers_per_queue().get("d") == 1, what="w1 on queue d")
    assert control.shutdown(destination=[W2], reply=True, timeout=1) == []  # as Celery: no reply
    assert two[1].proc.wait(timeout=30) == 0
    assert live(dsn) == {W1}


def test_with_no_worker_ping_is_empty_and_status_says_no_nodes(dsn: str) -> None:
    with bound(capp.app, dsn):
        assert capp.app.control.ping(timeout=1) == []
        assert capp.app.control.inspect(timeout=1).ping() is None
        for _ in range(2):
            capp.add.delay(1, 1)
        assert capp.app.control.purge() == 2
        assert capp.app.control.purge() == 0
    done = celery(dsn, "status")
    assert done.returncode == 69
    assert "No nodes replied within time constraint" in done.stderr
