"""A celery_compat app for the worker-flag tests (``tests/test_worker_pool_flags.py``), run by
real ``ujobs-bridge worker -A apps.celery_flags_app`` and ``celery -A apps.celery_flags_app
worker`` processes. Its ``ujobs_database_url`` comes from ``CELERY_CLI_TEST_DSN``, its beat
schedule fires ``flags.tick`` every second (for ``-B``), and its tasks report the process they
ran in, hold memory, wait on a file (a gate the test opens), or meet the time limits."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from celery_compat import Celery

app = Celery("celery_flags_app")
app.conf.ujobs_database_url = os.environ.get("CELERY_CLI_TEST_DSN") or None
app.conf.task_default_queue = "flags"
app.conf.beat_schedule = {"tick": {"task": "flags.tick", "schedule": 1.0}}
if os.environ.get("FLAGS_APP_MAX_TASKS"):  # the app's own setting, as a project would set it
    app.conf.worker_max_tasks_per_child = int(os.environ["FLAGS_APP_MAX_TASKS"])

_HELD: list[bytes] = []  # what hog() keeps alive in its process
_pause = threading.Event()  # never set: a wait that only time ends


def _rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


@app.task(name="flags.whoami", bind=True)
def whoami(self: Any) -> dict[str, Any]:
    return {"pid": os.getpid(), "retries": self.request.retries, "rss_kib": _rss_kib()}


@app.task(name="flags.hog")
def hog(mib: int) -> dict[str, Any]:
    """Keep ``mib`` MiB resident in this process (written, so the pages are really there)."""
    _HELD.append(b"\x01" * (mib * 1024 * 1024))
    return {"pid": os.getpid(), "rss_kib": _rss_kib()}


@app.task(name="flags.gated")
def gated(gate: str) -> int:
    """Hold a pool slot until the file ``gate`` exists (at most a minute)."""
    deadline = time.monotonic() + 60
    while not Path(gate).exists() and time.monotonic() < deadline:
        _pause.wait(0.05)
    return os.getpid()


@app.task(name="flags.soft")
def soft() -> str:
    """Catches the soft time limit, as Celery tasks do to clean up."""
    try:
        for _ in range(600):
            _pause.wait(0.05)
    except SoftTimeLimitExceeded:
        return f"soft in {os.getpid()}"
    return "no limit"


@app.task(name="flags.stubborn")
def stubborn() -> str:
    """Ignores the soft limit and keeps going: only the hard limit ends it."""
    for _ in range(600):
        try:
            _pause.wait(0.05)
        except SoftTimeLimitExceeded:
            continue
    return "no limit"


@app.task(name="flags.tick")
def tick() -> str:
    return "tock"


@app.task(name="flags.blocked_hard", time_limit=2)
def blocked_hard(seconds: float) -> str:
    """Blocks in one ``time.sleep`` far past its hard limit."""
    time.sleep(seconds)
    return "slept"


@app.task(name="flags.blocked_soft", soft_time_limit=1, time_limit=30)
def blocked_soft(seconds: float, where: str) -> dict[str, Any]:
    """Blocks in one ``time.sleep`` (``where="sleep"``) or one socket read that nothing answers
    (``"socket"``) past its soft limit, and says whether and when the limit reached it."""
    began = time.monotonic()
    left, right = socket.socketpair()
    try:
        if where == "socket":
            left.settimeout(seconds)
            left.recv(1)
        else:
            time.sleep(seconds)
    except SoftTimeLimitExceeded:
        return {"caught": True, "after_s": time.monotonic() - began, "pid": os.getpid()}
    except TimeoutError:
        pass
    finally:
        left.close()
        right.close()
    return {"caught": False, "after_s": time.monotonic() - began, "pid": os.getpid()}
