"""How the bridge worker runs a ``django.tasks`` task: the job body each task becomes.

Why it exists: a job body of the engine is a function of the row's arguments; a Django task
wants Django's connection hygiene around it (``close_old_connections``, as a request gets), its
``TaskContext`` when it ``takes_context``, its return value made JSON as Django makes it, and
the ``task_started`` / ``task_finished`` signals. A task that raises fails the attempt with the
exception itself, so the engine stores its traceback and retries or dead-letters it by the
backend's ``MAX_ATTEMPTS``.

What it is not: the worker loop (the engine's), or the project as the worker loads it
(``project.py``).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connections
from django.utils import timezone

from ujobs_bridge import current_job
from ujobs_bridge.ext.jobs import node_name
from ujobs_django import compat
from ujobs_django.compat import AnyTask, TaskContext, TaskResult, TaskResultStatus


def body_for(alias: str, sender: type, task: AnyTask) -> Callable[..., Any]:
    """The job body of ``task`` (of the backend ``alias``, whose class ``sender`` sends the
    signals): runs it as Django's worker contract says."""

    def run_django_task(*args: Any, **kwargs: Any) -> Any:
        return run_task(alias, sender, task, list(args), dict(kwargs))

    run_django_task.__qualname__ = run_django_task.__name__ = f"run {task.module_path}"
    return run_django_task


def run_task(
    alias: str, sender: type, task: AnyTask, args: list[Any], kwargs: dict[str, Any]
) -> Any:
    job = current_job()
    now = timezone.now()
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=[],
        worker_ids=[node_name()] * max(job.attempt, 1),
    )
    _close_old_connections()
    compat.task_started.send(sender, task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = compat.normalize_json(value)
    except BaseException as exc:
        object.__setattr__(result, "finished_at", timezone.now())
        final = job.attempt >= job.max_attempts
        object.__setattr__(
            result, "status", TaskResultStatus.FAILED if final else TaskResultStatus.READY
        )
        result.errors.append(
            compat.TaskError(
                exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                traceback="".join(traceback.format_exception(exc)),
            )
        )
        compat.task_finished.send(sender, task_result=result)
        raise
    finally:
        _close_old_connections()
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    compat.task_finished.send(sender, task_result=result)
    return value


def _close_old_connections() -> None:
    """Django's per-request hygiene around a body (connections past ``CONN_MAX_AGE`` or broken
    are closed), skipped while this thread is inside ``atomic()`` (a test performing a task in
    its own transaction), whose connection must stay."""
    if any(c.in_atomic_block for c in connections.all(initialized_only=True)):
        return
    close_old_connections()
