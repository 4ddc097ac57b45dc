"""From a fresh venv with only the README's install command (``pip install -e .``), Celery's
guide layout app (``proj/celery.py`` + ``proj/__init__.py``) whose ``broker_url`` is ``redis://``
sends a task with ``.delay()`` and the bridge worker of that venv runs it.

Why a venv of its own: the test venv has ``.[test]``, which brings packages (``packaging`` among
them) a user's venv may not have; kombu's Redis transport, imported at the first ``.delay()`` of
an app on a ``redis://`` broker, needs what only ``kombu[redis]`` brings. The slowest test here
(a full install into an empty venv, from the machine's wheel cache)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from worker_proc import TESTS_DIR

from conftest import wait_for
from ujobs_bridge.testing import REDIS_URL_ENV, redis_url

# its own xdist group: a pip install of the package runs beside the rest of the suite
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("fresh-venv")]
ROOT = TESTS_DIR.parent

SEND = """
from apps.guide_proj import celery_app
from apps.guide_proj.tasks import add
assert celery_app.conf.broker_url.startswith("redis://")
print("result", add.delay(2, 3).get(timeout=60))
"""


def test_the_readme_install_runs_a_guide_layout_app_on_a_redis_broker(
    dsn: str, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    # The venv gets no pip of its own (ensurepip is a second install of pip): the test venv's
    # pip installs into it (--python), which is the README's `pip install -e .` there.
    # --no-compile: the worker and the sender compile only the modules they import.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
         "install", "-q", "--no-compile", "-e", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-4000:]
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(TESTS_DIR),  # the app's package only; nothing of the test venv
        "GUIDE_PROJ_DATABASE_URL": dsn,
        REDIS_URL_ENV: redis_url(11),  # apps.guide_proj's broker: the test kit's Redis, given
    }
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [str(venv / "bin" / "ujobs-bridge"), "worker", "-A", "apps.guide_proj", "-Q", "guide"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=TESTS_DIR, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(
            lambda: worker.poll() is not None or "ready" in log.read_text(),
            timeout=60,
            what="the fresh venv's worker ready",
        )
        assert worker.poll() is None, log.read_text()
        sent = subprocess.run(
            [str(venv / "bin" / "python"), "-c", SEND],
            env=env, cwd=TESTS_DIR, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr[-4000:]
        assert "result 5" in sent.stdout
    except BaseException:
        print(log.read_text()[-4000:])
        raise
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
