"""The real ``celery`` console script on a celery_compat app, against Postgres: ``beat`` runs the
bridge scheduler (``-S`` keeps Celery's beat with the class it names), ``call`` sends a row that
the bridge worker runs, ``result`` reads it back from Postgres, ``shell`` has the app and its
tasks. Every command reads the app's ``ujobs_database_url`` (``CELERY_CLI_TEST_DSN``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from worker_proc import TESTS_DIR, WorkerProc

from conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
CELERY = str(Path(sys.executable).parent / "celery")  # the real console script of this venv


def _env(dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    env["UJOBS_DATABASE_URL"] = dsn
    env["CELERY_CLI_TEST_DSN"] = dsn
    return env


def _celery(dsn: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CELERY, *args], env=_env(dsn), cwd=TESTS_DIR, capture_output=True, text=True,
        timeout=60, input=stdin,
    )  # fmt: skip


def _ticks(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select count(*) from x_jobs where name = 'handover.tick'").fetchone()
    return int(row[0]) if row else 0


def _beat(dsn: str, tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "beat.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [CELERY, "-A", "apps.celery_handover_app", "beat", "-l", "INFO", *extra],
            stdout=out, stderr=subprocess.STDOUT, env=_env(dsn), cwd=TESTS_DIR,
            start_new_session=True,
        )  # fmt: skip
    return proc, log


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_celery_beat_runs_the_bridge_scheduler(dsn: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "beat.pid"
    proc, log = _beat(
        dsn, tmp_path, "--max-interval", "1", "-s", str(tmp_path / "s"), "--pidfile", str(pidfile)
    )
    try:
        wait_for(lambda: _ticks(dsn) >= 2, timeout=60, what="the bridge scheduler firing ticks")
        text = log.read_text()
        assert "celery beat on the bridge" in text and "scheduler" in text
        assert pidfile.read_text().strip() == str(proc.pid)
        with psycopg.connect(dsn, autocommit=True) as conn:
            leader = conn.execute("select holder from x_scheduler_leader").fetchone()
        assert leader is not None and f":{proc.pid}:" in leader[0]
        assert _stop(proc) == 0
        assert not pidfile.exists()
        assert not (tmp_path / "s").exists()  # no shelve file: the state is in Postgres
    except BaseException:
        print(log.read_text()[-4000:])
        raise
    finally:
        _stop(proc)


def test_celery_beat_with_a_named_scheduler_is_celerys_beat(dsn: str, tmp_path: Path) -> None:
    proc, log = _beat(
        dsn, tmp_path, "-S", "celery_compat.beat.scheduler:BeatScheduler",
        "-s", str(tmp_path / "s"),
    )  # fmt: skip
    try:
        wait_for(lambda: _ticks(dsn) >= 2, timeout=60, what="celery beat sending ticks")
        assert "celery_compat.beat.scheduler.BeatScheduler" in log.read_text()
        assert "celery beat on the bridge" not in log.read_text()
    finally:
        _stop(proc)


def test_celery_beat_refuses_remote_control(dsn: str) -> None:
    done = _celery(dsn, "-A", "apps.celery_handover_app", "beat", "--enable-remote-control")
    assert done.returncode == 2 and "answers no remote control" in done.stderr, done.stderr


def test_celery_call_result_and_shell_against_postgres(dsn: str, tmp_path: Path) -> None:
    called = _celery(
        dsn, "-A", "apps.celery_cli_worker", "call", "apps.celery_cli_worker.add", "-a", "[2, 3]"
    )
    assert called.returncode == 0, called.stderr
    task_id = called.stdout.strip().splitlines()[-1]
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select j.state from x_jobs j where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = %s",
            (task_id,),
        ).fetchone()
    assert row == ("ready",)  # a row in Postgres, not a broker message
    worker = WorkerProc(dsn, "apps.celery_cli_worker", "a", tmp_path / "worker.log")
    try:
        result = ""

        def read() -> bool:
            nonlocal result
            done = _celery(dsn, "-A", "apps.celery_cli_worker", "result", task_id)
            result = done.stdout.strip()
            return done.returncode == 0 and result == "5"

        wait_for(read, timeout=60, what=f"celery result {task_id} to print 5 ({result!r})")
    except BaseException:
        print(worker.output()[-4000:])
        raise
    finally:
        worker.close()
    shell = _celery(
        dsn,
        "-A",
        "apps.celery_cli_worker",
        "shell",
        "--python",
        stdin="print('app', app.main, type(app).__module__, 'add' in dir())\n",
    )
    assert shell.returncode == 0, shell.stderr
    assert "app celery_cli_worker celery_compat.app True" in shell.stdout, shell.stdout
