"""A Celery app for ``tests/test_observer_faults.py``: tasks that raise exceptions nothing can
print (``__str__`` raises, ``__repr__`` raises, formatting their traceback raises), with task
signal receivers connected that read the exception as a project's would (its text, its repr),
and OpenTelemetry's SDK set up at import (``apps.observer_jobs`` does it)."""

from __future__ import annotations

import os
import threading
from typing import Any

from celery import signals

from apps import observer_jobs
from celery_compat import Celery

app = Celery("celery_observer_app")
app.conf.task_default_queue = "observed_celery"

seen: list[str] = []


@signals.task_failure.connect
def on_failure(sender: Any, task_id: str, exception: BaseException, **kw: Any) -> None:
    seen.append(f"{type(exception).__name__}: {exception!s} {exception!r}")


@signals.task_postrun.connect
def on_postrun(sender: Any, task_id: str, retval: Any, state: str, **kw: Any) -> None:
    seen.append(f"{state}: {retval!r}")


@app.task
def bad_str() -> None:
    raise observer_jobs.UnprintableError("hidden")


@app.task
def bad_repr() -> None:
    raise observer_jobs.UnreprableError("hidden")


@app.task
def bad_traceback() -> None:
    raise observer_jobs.UnformattableError("hidden")


@app.task
def quick(i: int) -> dict[str, Any]:
    return {"i": i, "pid": os.getpid(), "thread": threading.current_thread().name}
