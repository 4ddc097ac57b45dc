"""The Celery-style app ``ujobs-bridge demo`` runs through the bridge: plain Celery code.

Why it exists: the demo's second part shows that a Celery codebase runs on the engine with its
imports changed and nothing else. This module is written exactly as a Celery user writes one
(``celery_compat.Celery``, ``@shared_task``, ``bind=True`` and ``self.retry``, a
``beat_schedule``), so a real worker and scheduler run it too::

    ujobs-bridge worker -A celery_compat.cli.demo_app
    ujobs-bridge scheduler -A celery_compat.cli.demo_app

``flaky_fetch`` fails its first attempt with a retry (``self.retry(countdown=...)``) and then
succeeds, returning how many retries it took; ``heartbeat`` is the beat entry's task and returns
the occurrence the scheduler fired it for.

What it is not: a test app (``tests/apps``) or a benchmark (``bench.compat_tasks``). The demo
itself (queues unique to a run, a worker, a scheduler) is ``celery_compat/cli/demo.py``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery_compat import Celery, shared_task

DEMO_QUEUE = "demo-celery"  # the declared queue; the demo routes a run to a queue of its own
HEARTBEAT_EVERY = timedelta(seconds=1)
RETRY_COUNTDOWN_S = 0.1

app = Celery("ujobs_demo_celery")
app.conf.update(
    task_default_queue=DEMO_QUEUE,
    result_expires=3600,
    beat_schedule={
        "demo heartbeat": {"task": "demo.heartbeat", "schedule": HEARTBEAT_EVERY},
    },
)


class FeedUnavailable(Exception):
    """A transient failure: the task retries itself."""


@shared_task(name="demo.add")  # type: ignore[untyped-decorator]
def add(x: int, y: int) -> int:
    return x + y


@shared_task(name="demo.mul")  # type: ignore[untyped-decorator]
def mul(x: int, y: int) -> int:
    return x * y


@shared_task(name="demo.square")  # type: ignore[untyped-decorator]
def square(x: int) -> int:
    return x * x


@shared_task(bind=True, name="demo.flaky_fetch", max_retries=3)  # type: ignore[untyped-decorator]
def flaky_fetch(self: Any, url: str) -> dict[str, Any]:
    """Fails its first attempt the Celery way (``self.retry``), then succeeds."""
    if self.request.retries < 1:
        raise self.retry(exc=FeedUnavailable(f"{url}: 503"), countdown=RETRY_COUNTDOWN_S)
    return {"url": url, "retries": self.request.retries}


@shared_task(bind=True, name="demo.heartbeat")  # type: ignore[untyped-decorator]
def heartbeat(self: Any) -> dict[str, Any]:
    """The beat entry's task: which occurrence the scheduler fired."""
    return {"occurrence": getattr(self.request, "ujobs_occurrence", None)}
