"""A PLAIN ``celery.Celery`` app (no celery_compat import) with a Redis broker and result backend
(db 4), for ``tests/test_celery_adoption.py``: its messages are drained by ``migrate`` and run
by ``ujobs-bridge worker -A apps.adopt_plain``, which adopts it. Every body records in Postgres
what ran (table ``adopt_ran``, created by the test), so the test sees runs from another process.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from celery import Celery

from ujobs_bridge.testing import redis_url

REDIS_URL = redis_url(4)  # the test kit's server (inherited from the test)
QUEUE = "adopt-plain"

app = Celery("adopt_plain", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    ujobs_broker_tasks=["adopt_plain.on_broker"],
)


def _record(what: str) -> None:
    dsn = os.environ.get("UJOBS_DATABASE_URL")
    if not dsn:
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into adopt_ran (what) values (%s)", (what,))


@app.task(name="adopt_plain.add")
def add(x: int, y: int) -> int:
    _record(f"add({x}, {y})")
    return x + y


@app.task(name="adopt_plain.mul")
def mul(x: int, y: int) -> int:
    _record(f"mul({x}, {y})")
    return x * y


@app.task(name="adopt_plain.boom")
def boom(tag: str) -> None:
    _record(f"boom({tag})")
    raise ValueError(f"boom {tag}")


@app.task(name="adopt_plain.on_error")
def on_error(task_id: str) -> str:
    """An errback taking only the failed task's id: Celery SENDS it as a message."""
    _record(f"on_error({task_id})")
    return "handled"


@app.task(name="adopt_plain.flaky", bind=True, max_retries=3)
def flaky(self: Any, fail_times: int) -> int:
    _record(f"flaky(try {self.request.retries})")
    if self.request.retries < fail_times:
        raise self.retry(exc=RuntimeError("not yet"), countdown=0)
    return self.request.retries


@app.task(name="adopt_plain.spawner")
def spawner(n: int) -> str:
    _record(f"spawner({n})")
    return str(add.delay(n, n).id)


@app.task(name="adopt_plain.on_broker")
def on_broker() -> str:
    return "ran on a Celery worker"
