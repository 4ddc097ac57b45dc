"""The plain Celery app that keeps a Redis queue filling while ``migrate --follow`` drains it.

Why it exists: migrate's promise is about messages REAL Celery wrote, so the soak publishes
with an ordinary ``celery.Celery`` app (no celery_compat) to Redis (db 8 by default,
``SOAK_REDIS_URL``), into a queue whose name carries the run id. Redis is not faulted: every
publish that returns is a message the bridge must run.

What it is not: a worker app (the bodies are ``celery_tasks.soak_migrated``, on the bridge).
"""

from __future__ import annotations

from typing import Any

from celery import Celery

TASK = "soak.migrated"


def make_app(broker: str, queue: str) -> Any:
    app = Celery("soak_source", broker=broker, set_as_current=False)
    app.conf.update(task_default_queue=queue, broker_connection_retry_on_startup=True)
    return app


def publish(app: Any, queue: str, key: str, fail: int, work_ms: int, **options: Any) -> None:
    """One message whose task id is ``key`` (``options``: ``eta``, ``expires``...)."""
    app.send_task(TASK, args=(key, fail, work_ms), task_id=key, queue=queue, **options)
