"""A celery_compat app run by the real ``celery -A apps.celery_cli_worker worker`` command; its
``ujobs_database_url`` comes from ``CELERY_CLI_TEST_DSN`` (the test's database), as a project's
settings would name it."""

from __future__ import annotations

import os

from celery_compat import Celery

app = Celery("celery_cli_worker")
app.conf.ujobs_database_url = os.environ.get("CELERY_CLI_TEST_DSN") or None
app.conf.task_default_queue = "a"
app.conf.task_routes = {"apps.celery_cli_worker.mul": {"queue": "b"}}


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def mul(x: int, y: int) -> int:
    return x * y


@app.task(bind=True)
def node(self: object) -> str:
    return str(self.request.hostname)
