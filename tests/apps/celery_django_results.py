"""One project as both systems run it with django-celery-results' ``django-db`` result backend,
for ``test_celery_django_results.py``: ``plain`` is a ``celery.Celery`` app (a real Celery worker
runs it, its broker the test kit's Redis, db 13: this file's), ``bridge`` the same project as a
celery_compat app. Both keep ``result_extended`` on, so every column of ``TaskResult`` is
written. The tasks are the same functions under the same names on both."""

from __future__ import annotations

from typing import Any

import celery

from celery_compat import Celery
from ujobs_bridge.testing import redis_url

REDIS_DB = 13
REDIS_URL = redis_url(REDIS_DB)
CONF: dict[str, Any] = {
    "broker_url": REDIS_URL,
    "result_backend": "django-db",
    "result_extended": True,
    "task_track_started": True,
    "broker_connection_retry_on_startup": True,
    "worker_hijack_root_logger": False,
}

bridge = Celery("dcr_bridge", set_as_current=False)
bridge.conf.update(CONF)
plain = celery.Celery("dcr_celery", set_as_current=False)
plain.conf.update(CONF)


def add(x: int, y: int) -> int:
    return x + y


def greet(name: str, greeting: str = "hello") -> str:
    return f"{greeting} {name}"


def fail(why: str) -> None:
    raise ValueError(why)


def total(parts: list[int]) -> int:
    return sum(parts)


def retried(self: Any, marker: str) -> str:
    if self.request.retries == 0:
        raise self.retry(countdown=0, max_retries=1)
    return f"{marker} after {self.request.retries}"


def tasks(app: Any) -> dict[str, Any]:
    """The project's tasks on ``app``, by short name."""
    made = {
        name: app.task(name=f"dcr.{name}", shared=False)(body)
        for name, body in (("add", add), ("greet", greet), ("fail", fail), ("total", total))
    }
    made["retried"] = app.task(name="dcr.retried", bind=True, shared=False)(retried)
    return made


TASKS = {"bridge": tasks(bridge), "plain": tasks(plain)}
