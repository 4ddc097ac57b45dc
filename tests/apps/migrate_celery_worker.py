"""A plain Celery 5 app run by a REAL ``celery worker`` beside the drainer in the migrate tests.
Its ``migrate_proj.record`` appends the task id to ``$MIGRATE_TEST_OUT`` (what Celery ran), then
waits for the token on the Redis list ``$MIGRATE_TEST_GATE`` and passes it on: the test holds the
worker inside its first task while the drainer runs, and releases it by pushing the token."""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import Celery

app = Celery(
    "migrate_celery_worker", broker=os.environ.get("MIGRATE_TEST_BROKER"), set_as_current=False
)
app.conf.update(worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)


@app.task(name="migrate_proj.record", bind=True, shared=False)
def record(self: Any, tag: str) -> str:
    with open(os.environ["MIGRATE_TEST_OUT"], "a") as out:
        out.write(f"{self.request.id}\n")
    gate = os.environ["MIGRATE_TEST_GATE"]
    client = redis.Redis.from_url(os.environ["MIGRATE_TEST_BROKER"])
    if client.blpop([gate], timeout=30) is None:  # held until the test releases the worker
        raise RuntimeError("the test never released the Celery worker")
    client.rpush(gate, "go")  # the next task passes straight through
    return tag
