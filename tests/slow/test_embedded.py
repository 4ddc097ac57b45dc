"""The embedded default: with no --dsn and no UJOBS_DATABASE_URL, a command starts a private
Postgres under UJOBS_HOME, says so in one line, and the next command reuses it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from conftest import wait_for


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "UJOBS_DATABASE_URL"}
    env["UJOBS_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_commands_start_then_reuse_an_embedded_postgres(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    try:
        first = _run(home, "db", "upgrade")
        assert first.returncode == 0, first.stderr
        assert "embedded Postgres started" in first.stderr and str(home) in first.stderr
        assert "applied 0001_initial" in first.stdout
        second = _run(home, "jobs", "stats", "--json")
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip() == "[]"
        third = _run(home, "db", "status")
        assert "embedded Postgres reused" in third.stderr
    finally:
        pidfile = home / "postgres" / "postmaster.pid"
        if pidfile.exists():
            pid = int(pidfile.read_text().split()[0])
            os.kill(pid, signal.SIGINT)  # fast shutdown
            wait_for(
                lambda: not psutil.pid_exists(pid), timeout=30, what="the embedded server to stop"
            )
