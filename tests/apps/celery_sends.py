"""Tasks that exercise Celery's send semantics on the bridge: the same-key re-send used for rate
limiting (``self.request.retries -= 1; raise self.retry()``), a body that crashes the worker
after such a re-send, and the values Celery's JSON serializer carries exactly.

Run in-process by ``tests/test_celery_send_semantics.py`` / ``test_celery_exact_values.py`` and
by a real worker process (``-A apps.celery_sends -Q sends``) for the crash tests.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

from celery_compat import Celery

app = Celery("celery_sends")
app.conf.update(task_default_queue="sends", result_expires=3600)

RAN: Counter[str] = Counter()


@app.task(bind=True, max_retries=1)
def throttled(self: Any, waits: int) -> dict[str, int]:
    """One real retry, then ``waits`` re-sends under the same key (not counted against
    ``max_retries=1``, which would refuse a second real retry), then success."""
    RAN["throttled"] += 1
    if self.request.retries == 0:
        raise self.retry(countdown=0)
    if RAN["throttled"] <= waits + 1:
        self.request.retries -= 1
        raise self.retry(countdown=0)
    return {"retries": self.request.retries, "runs": RAN["throttled"]}


@app.task(bind=True)
def resend_once(self: Any, step: int = 0) -> dict[str, int]:
    """Re-sends itself once under its own (task id, retries), then returns."""
    if step == 0:
        self.request.retries -= 1
        raise self.retry(kwargs={"step": 1}, countdown=0)
    return {"retries": self.request.retries, "pid": os.getpid()}


@app.task(bind=True)
def resend_then_die(self: Any) -> None:
    """Re-sends itself under its own key, then kills its worker: a crash loop."""
    self.request.retries -= 1
    self.retry(countdown=0, throw=False)
    os.kill(os.getpid(), signal.SIGKILL)


@app.task
def add(x: Any, y: Any) -> Any:
    RAN["add"] += 1
    return x + y


@app.task
def mul(x: Any, y: Any) -> Any:
    return x * y


@app.task
def xsum(values: list[Any]) -> Any:
    return sum(values)


@app.task
def identity(value: Any) -> Any:
    return value


@app.task
def echo(*args: Any, **kwargs: Any) -> list[Any]:
    return [list(args), kwargs]


@app.task(bind=True)
def headers_of(self: Any) -> dict[str, Any]:
    return {k: v for k, v in (self.request.headers or {}).items() if k.startswith("x-")}


@app.task
def returns_unstorable(kind: str) -> Any:
    if kind == "object":
        return object()
    loop: list[Any] = []
    loop.append(loop)
    return loop
