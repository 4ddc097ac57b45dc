"""A plain module Celery app (``from celery_compat import Celery``) for the in-process behaviour
tests: arithmetic for canvas, tasks that fail, retry in both styles, block, run out of time, and
report their own ``self.request``.

Tasks record what really ran in ``RAN`` (a Counter by label) so a test can tell "never ran" from
"ran and its result was lost". ``GATE``/``STARTED`` let a test hold a body while it acts on it.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from celery.exceptions import Reject, SoftTimeLimitExceeded

from celery_compat import Celery

app = Celery("celery_tasks")
app.conf.update(
    task_default_queue="celery",
    result_expires=3600,
    task_eager_propagates=True,
)

RAN: Counter[str] = Counter()
ERRBACKS: list[dict[str, Any]] = []
STARTED = threading.Event()
GATE = threading.Event()


def reset() -> None:
    RAN.clear()
    ERRBACKS.clear()
    STARTED.clear()
    GATE.clear()


class Transient(Exception):
    pass


@app.task
def add(x: int, y: int) -> int:
    RAN["add"] += 1
    return x + y


@app.task
def mul(x: int, y: int) -> int:
    RAN["mul"] += 1
    return x * y


@app.task
def tsum(values: list[int]) -> int:
    RAN["tsum"] += 1
    return sum(values)


@app.task
def identity(value: Any) -> Any:
    return value


@app.task
def fail(message: str = "boom") -> None:
    RAN["fail"] += 1
    raise ValueError(message)


@app.task(ignore_result=True)
def fire_and_forget(x: int) -> int:
    RAN["fire_and_forget"] += 1
    return x


@app.task(bind=True)
def request_info(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """What a bound task sees of its own request (JSON-safe copy)."""
    r = self.request
    return {
        "id": r.id,
        "args": list(r.args or []),
        "kwargs": dict(r.kwargs or {}),
        "retries": r.retries,
        "eta": r.eta,
        "expires": r.expires,
        "delivery_info": dict(r.delivery_info or {}),
        "hostname": r.hostname,
        "root_id": r.root_id,
        "parent_id": r.parent_id,
        "group": r.group,
        "called_directly": r.called_directly,
        "is_eager": r.is_eager,
        "x_tenant_attr": getattr(r, "x_tenant", None),
        "headers": dict(r.headers or {}),
    }


@app.task(bind=True)
def spawn_child(self: Any) -> str:
    """Sends a child task from inside a task; returns the child's id."""
    return str(request_info.delay().id)


@app.task
def on_error(request: Any, exc: BaseException, traceback: Any) -> None:
    """A new-style errback: records what it was called with."""
    ERRBACKS.append({"id": request.id, "exc_type": type(exc).__name__, "exc": str(exc)})


@app.task
def on_error_old(task_id: str) -> None:
    ERRBACKS.append({"id": task_id, "exc_type": None, "exc": None})


# -- retries ---------------------------------------------------------------------------------


@app.task(
    bind=True,
    autoretry_for=(Transient,),
    retry_backoff=3,
    retry_backoff_max=10,
    retry_jitter=False,
    retry_kwargs={"max_retries": 4},
)
def autoretry_exact(self: Any) -> None:
    RAN["autoretry_exact"] += 1
    raise Transient(f"attempt {self.request.retries}")


@app.task(bind=True, autoretry_for=(Transient,), retry_backoff=True, max_retries=6)
def autoretry_jitter(self: Any) -> None:
    RAN["autoretry_jitter"] += 1
    raise Transient(f"attempt {self.request.retries}")


@app.task(bind=True, max_retries=2)
def manual_retry(self: Any, succeed_at: int | None = None) -> str:
    RAN["manual_retry"] += 1
    if succeed_at is not None and self.request.retries >= succeed_at:
        return f"ok after {self.request.retries}"
    raise self.retry(exc=Transient(f"try {self.request.retries}"), countdown=7)


@app.task(bind=True, max_retries=1, default_retry_delay=5)
def retry_without_exc(self: Any) -> None:
    RAN["retry_without_exc"] += 1
    raise self.retry()


# -- time, revoke, reject ----------------------------------------------------------------------


@app.task(bind=True)
def blocks(self: Any) -> str:
    """Runs until GATE opens (Python-level waits, so async exceptions land)."""
    RAN["blocks"] += 1
    STARTED.set()
    while not GATE.wait(0.01):
        pass
    RAN["blocks_finished"] += 1
    return "released"


@app.task(soft_time_limit=0.2)
def soft_limited() -> str:
    RAN["soft_limited"] += 1
    try:
        while not GATE.wait(0.01):
            pass
    except SoftTimeLimitExceeded:
        return "soft limit caught"
    return "gate opened"


@app.task(time_limit=0.2)
def hard_limited() -> str:
    RAN["hard_limited"] += 1
    while not GATE.wait(0.01):
        pass
    RAN["hard_limited_finished"] += 1
    return "gate opened"


@app.task(bind=True, track_started=True)
def tracked(self: Any) -> str:
    STARTED.set()
    while not GATE.wait(0.01):
        pass
    return "tracked"


@app.task(bind=True)
def rejects(self: Any, requeue: bool) -> None:
    RAN["rejects"] += 1
    if requeue and RAN["rejects"] > 1:
        return None
    raise Reject("not now", requeue=requeue)


@app.task(bind=True)
def waits_on_child(self: Any) -> Any:
    """Calls get() on another task inside a task: Celery forbids it (disable_sync_subtasks)."""
    return add.delay(1, 1).get(timeout=5)


@app.task(bind=True)
def waits_allowed(self: Any) -> Any:
    """The documented way out: ``allow_join_result()`` lets a task wait on another."""
    from celery.result import allow_join_result

    with allow_join_result():
        return add.delay(1, 1).get(timeout=5)


@app.task(bind=True)
def retry_after_gate(self: Any) -> None:
    """Runs until GATE opens, then asks for a retry a minute later."""
    RAN["retry_after_gate"] += 1
    STARTED.set()
    while not GATE.wait(0.01):
        pass
    raise self.retry(countdown=60)


@app.task(bind=True)
def progress(self: Any) -> str:
    self.update_state(state="PROGRESS", meta={"done": 1, "total": 2})
    STARTED.set()
    while not GATE.wait(0.01):
        pass
    return "finished"
