"""A plain module Celery app, run by a real ``ujobs-bridge worker -A apps.celery_plain`` process:
the only change from a Celery project is ``from celery_compat import Celery``."""

from __future__ import annotations

import os
from typing import Any

from celery_compat import Celery

app = Celery("celery_plain")
app.conf.task_default_queue = "plain"


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def tsum(values: list[int]) -> int:
    return sum(values)


@app.task(bind=True)
def whoami(self: Any) -> dict[str, Any]:
    return {"pid": os.getpid(), "hostname": self.request.hostname, "retries": self.request.retries}


@app.task(bind=True, max_retries=3)
def flaky(self: Any, fail_times: int) -> dict[str, Any]:
    if self.request.retries < fail_times:
        raise self.retry(exc=RuntimeError("not yet"), countdown=0)
    return {"pid": os.getpid(), "retries": self.request.retries}
