"""Celery's worker flags, with their Celery meaning, on both worker commands: ``ujobs-bridge
worker`` and the real ``celery -A proj worker`` on a celery_compat app (which runs the bridge
worker, not a broker consumer)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_proc import TESTS_DIR, WorkerProc

from apps import celery_cli_worker as cli_app
from apps import celery_plain as p
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from conftest import wait_for
from ujobs_bridge._internal.cli import worker_flags as flags
from ujobs_bridge._internal.observe.introspect import Introspector

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
HOST = socket.gethostname()
CELERY = str(Path(sys.executable).parent / "celery")  # the real console script of this venv


def _env(dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    env["UJOBS_DATABASE_URL"] = dsn
    env["CELERY_CLI_TEST_DSN"] = dsn
    return env


def _bridge(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "worker", "-A", "apps.celery_plain", *args],
        env=_env(dsn),
        cwd=TESTS_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_node_names_expand_as_celery_host_format() -> None:
    assert flags.node_name("w1@%h", host="box.example.com") == "w1@box.example.com"
    assert flags.node_name("w1@%n", host="box.example.com") == "w1@box"
    assert flags.node_name("w1@%d", host="box.example.com") == "w1@example.com"
    assert flags.node_name("box2", host="box", prefix="celery") == "celery@box2"  # the host
    assert flags.node_name(None, prefix="celery").startswith("celery@")
    assert flags.node_name(None).startswith("ujobs@")  # the engine's own name for its apps
    assert flags.log_level("fatal") == flags.log_level("CRITICAL")
    assert flags.pool("solo", None) == ("threads", 1)
    assert flags.pool("prefork", 3) == ("processes", 3)


@pytest.mark.parametrize(
    ("app", "queue", "extra", "node", "sets"),
    [
        ("apps.celery_plain", "plain", [], f"celery@{HOST}", ["celery"]),
        ("apps.celery_plain", "plain", ["-n", "box2"], "celery@box2", ["celery"]),
        ("apps.presence_jobs", "basic", [], f"ujobs@{HOST}", []),
    ],
)
def test_a_celery_apps_worker_keeps_celerys_node_name_and_an_engine_app_gets_its_own(
    dsn: str, tmp_path: Path, app: str, queue: str, extra: list[str], node: str, sets: list[str]
) -> None:
    worker = WorkerProc(dsn, app, queue, tmp_path / "worker.log", extra=extra)
    try:

        def registered() -> dict[str, Any]:
            return {n.name: n.info.get("command_sets") for n in Introspector(dsn).nodes()}

        wait_for(lambda: registered() == {node: sets}, what=f"the node {node}")
    except BaseException:
        print(worker.output())
        raise
    finally:
        worker.close()


@pytest.fixture
def plain(dsn: str, tmp_path: Path) -> Iterator[WorkerProc]:
    worker = WorkerProc(
        dsn,
        "apps.celery_plain",
        "plain",
        tmp_path / "worker.log",
        extra=["-l", "INFO", "-n", "w1@%h", "-P", "prefork", "-c", "2"],
    )
    try:
        with bound(p.app, dsn):
            yield worker
    finally:
        worker.close()


def test_celery_flags_run_a_task_under_the_expanded_node_name(plain: WorkerProc) -> None:
    try:
        assert p.add.delay(2, 3).get(timeout=30) == 5
        wait_for(lambda: f"node=w1@{HOST}" in plain.output(), what="the node name in the log")
        assert "pool=processes" in plain.output() and "concurrency=2" in plain.output()
    except BaseException:
        print(plain.output())
        raise
    plain.term()
    assert plain.wait(timeout=20) == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--autoscale", "10,2", "-c", "4"], "drop -c"),
        (["--max-tasks-per-child", "100"], "needs the process pool"),
        (["--time-limit", "0"], "--time-limit"),
        (["-P", "eventlet"], "green pool"),
        (["-P", "solo", "-c", "4"], "one body at a time"),
        (["-X", "plain,ujobs"], "leaves no queue"),
    ],
)
def test_a_flag_with_no_meaning_here_exits_2_saying_why(
    dsn: str, args: list[str], says: str
) -> None:
    done = _bridge(dsn, "--dsn", dsn, *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr


def test_pidfile_is_written_refused_while_live_and_removed_at_exit(
    dsn: str, tmp_path: Path
) -> None:
    pidfile = tmp_path / "w.pid"
    worker = WorkerProc(
        dsn,
        "apps.celery_plain",
        "plain",
        tmp_path / "worker.log",
        extra=["--pidfile", str(pidfile)],
    )
    try:
        wait_for(lambda: "ready" in worker.output(), what="the worker ready")
        assert pidfile.read_text().strip() == str(worker.pid)
        second = _bridge(dsn, "--dsn", dsn, "--pidfile", str(pidfile))
        assert second.returncode == 2 and "still running" in second.stderr
        worker.term()
        assert worker.wait(timeout=20) == 0
        assert not pidfile.exists()
    except BaseException:
        print(worker.output())
        raise
    finally:
        worker.close()


def test_logfile_receives_the_worker_log(dsn: str, tmp_path: Path) -> None:
    logfile = tmp_path / "celery.log"
    worker = WorkerProc(
        dsn, "apps.celery_plain", "plain", tmp_path / "worker.log", extra=["-f", str(logfile)]
    )
    try:
        with bound(p.app, dsn):
            assert p.add.delay(1, 1).get(timeout=30) == 2
        wait_for(lambda: logfile.exists() and "INFO" in logfile.read_text(), what="a log line")
    finally:
        worker.close()


def test_the_celery_console_script_runs_the_bridge_worker(dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "celery.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [CELERY, "-A", "apps.celery_cli_worker", "worker",
             "-l", "INFO", "-c", "2", "-Q", "a,b", "-n", "w1@%h"],
            stdout=out, stderr=subprocess.STDOUT, env=_env(dsn), cwd=TESTS_DIR,
            start_new_session=True,
        )  # fmt: skip
        try:
            wait_for(
                lambda: proc.poll() is not None or "ready" in log.read_text(),
                what="the celery worker ready",
            )
            assert proc.poll() is None
            with bound(cli_app.app, dsn):
                assert cli_app.add.delay(2, 3).get(timeout=30) == 5
                assert cli_app.mul.delay(4, 5).get(timeout=30) == 20
            text = log.read_text()
            assert f"node=w1@{HOST}" in text and "queues=a,b" in text
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        except BaseException:
            print(log.read_text())
            raise
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def test_the_celery_console_script_refuses_a_flag_with_no_meaning_here(dsn: str) -> None:
    done = subprocess.run(
        [CELERY, "-A", "apps.celery_cli_worker", "worker", "--purge"],
        env=_env(dsn), cwd=TESTS_DIR, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "does not discard waiting messages" in done.stderr
