"""A plain Celery 5 app run by a REAL ``celery worker`` beside the drainer in the migrate tests.
Its ``migrate_proj.record`` appends the task id to ``$MIGRATE_TEST_OUT``: what Celery ran."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

app = Celery(
    "migrate_celery_worker", broker=os.environ.get("MIGRATE_TEST_BROKER"), set_as_current=False
)
app.conf.update(worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)


@app.task(name="migrate_proj.record", bind=True, shared=False)
def record(self: Any, tag: str) -> str:
    time.sleep(0.005)  # a little work, so the worker is busy while the drainer runs
    with open(os.environ["MIGRATE_TEST_OUT"], "a") as out:
        out.write(f"{self.request.id}\n")
    return tag
