"""A celery_compat app for the remote-control tests, run by the real ``celery`` console script
(``celery -A apps.celery_control_app worker|inspect|control|status|purge``); its database comes
from ``CELERY_CLI_TEST_DSN`` as a project's settings would name it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from celery_compat import Celery

app = Celery("celery_control_app")
app.conf.ujobs_database_url = os.environ.get("CELERY_CLI_TEST_DSN") or None
app.conf.task_default_queue = "a"
app.conf.task_routes = {"apps.celery_control_app.mul": {"queue": "b"}}


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(rate_limit="100/s")
def mul(x: int, y: int) -> int:
    return x * y


@app.task(bind=True)
def node(self: object) -> str:
    return str(self.request.hostname)  # type: ignore[attr-defined]


@app.task
def hold(path: str) -> str:
    """Runs until ``path`` exists (the test creates it), at most 30 s."""
    pause = threading.Event()
    deadline = time.monotonic() + 30
    while not Path(path).exists() and time.monotonic() < deadline:
        pause.wait(0.05)
    return path


@app.task
def stamp() -> float:
    return time.time()
