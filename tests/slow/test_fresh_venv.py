"""The release a user installs: the package's sdist and wheel are built (the wheel from the
sdist, as pip builds it from PyPI) and pass ``twine check --strict``; the wheel, installed alone
into a fresh venv (not the checkout), runs ``ujobs-bridge demo`` (its parts found through the
wheel's entry points, its SQL and templates through its package data), and a Celery guide-layout
app (``proj/celery.py`` + ``proj/__init__.py``) whose ``broker_url`` is ``redis://`` sends a task
with ``.delay()`` that the bridge worker of that venv runs.

Why a venv of its own: the test venv has ``.[test]``, which brings packages (``packaging`` among
them) a user's venv may not have; kombu's Redis transport, imported at the first ``.delay()`` of
an app on a ``redis://`` broker, needs what only ``kombu[redis]`` brings. One venv serves every
check here: it is the slowest test (a full install into an empty venv, from the machine's wheel
cache)."""

from __future__ import annotations

import json
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


def build_release(out: Path) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it (``python -m build``), checked as PyPI checks them.

    No build isolation: the test extra brings setuptools and build, so no build venv is made."""
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check",
         "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    from twine.commands.check import check  # in-process: one Python start-up fewer

    failed = check([str(wheels[0]), str(sdists[0])], strict=True)
    assert not failed, "twine check --strict failed (its output is above)"
    return wheels[0], sdists[0]


def test_the_built_wheel_installed_alone_runs_the_demo_and_a_guide_layout_app(
    dsn: str, tmp_path: Path
) -> None:
    wheel, _ = build_release(tmp_path / "dist")
    venv = tmp_path / "venv"
    # The venv gets no pip of its own (ensurepip is a second install of pip): the test venv's
    # pip installs the wheel into it (--python), as `pip install ujobs-bridge` would.
    # --no-compile: the demo, the worker and the sender compile only the modules they import.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
         "install", "-q", "--no-compile", str(wheel)],
        cwd=tmp_path, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-4000:]
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(TESTS_DIR),  # the app's package only; nothing of the test venv
        "GUIDE_PROJ_DATABASE_URL": dsn,
        REDIS_URL_ENV: redis_url(11),  # apps.guide_proj's broker: the test kit's Redis, given
    }
    # The demo, from outside the checkout: the README's first command, on the test's database.
    demo = subprocess.run(
        [str(venv / "bin" / "ujobs-bridge"), "demo", "--jobs", "40", "--dsn", dsn, "--json"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-4000:]
    shown = json.loads(demo.stdout)
    assert shown["states"] == {"done": 39, "dead": 1}, shown
    assert {"celery", "migrate"} <= set(shown), sorted(shown)
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
