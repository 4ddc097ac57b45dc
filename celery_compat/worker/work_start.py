"""A Celery task's attempt starts when Celery's tracer calls the task's function, not before.

Why it exists: the engine charges an attempt to a job whose worker dies (SIGKILL, the OOM
killer) only if its body had started, and a Celery task's body begins with Celery's prologue:
the request, expiry and revoke checks, ``task_received``, then in the tracer ``task_prerun``,
the STARTED state and ``before_start``. A worker killed in that prologue never ran the task, so
the task's job definitions say their work starts late (``work_starts_late``) and the tracer
calls the engine's ``work_starts()`` just before the task's function: ``traced`` gives each task
the tracer a Celery worker gives it (``task.__trace__``, which Celery's consumer and prefork
pool build at start), built around the task's ``run`` wrapped to say so first. The wrapper is
seen by ``build_tracer`` only: the task object is left as it was. A task whose class has its own
``__call__`` is traced through it (Celery calls the task, not ``run``): its start is said as the
tracer begins.

Only a first delivery's start waits for the function: a redelivered task's start is recorded
before its body begins, prologue included, so a task whose prologue kills its worker every time
still spends its ``ujobs_max_deliveries``.

What it is not: the execution of a task (``execution.py``), or where the engine records a start
(the worker's start marks).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from celery.app.trace import build_tracer, task_has_custom

from celery_compat.worker.request import hostname
from ujobs_bridge.ext.jobs import work_starts

_MARK = "_ujobs_work_starts"  # set on a tracer built here
_lock = threading.Lock()
_MISSING = object()


def traced(task: Any, app: Any) -> None:
    """Make ``task.__trace__`` a tracer that says the attempt's work starts right before it
    calls the task's function (built once per task and process; ``execution.run_message``
    then traces through it). A task with its own ``__call__`` says it now instead."""
    if getattr(task.__trace__, _MARK, False):  # built here: the task has no __call__ of its own
        return
    if task_has_custom(task, "__call__"):
        work_starts()
        return
    with _lock:
        if getattr(task.__trace__, _MARK, False):
            return
        own = task.__dict__.get("run", _MISSING)
        function = task.run

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            work_starts()
            return function(*args, **kwargs)

        task.run = run  # what build_tracer reads (once): the task keeps its own after
        try:
            tracer = build_tracer(task.name, task, app=app, hostname=hostname())
        finally:
            if own is _MISSING:
                del task.run
            else:
                task.run = own
        setattr(tracer, _MARK, True)
        task.__trace__ = tracer


__all__ = ["traced"]
