"""Where the ``django.tasks`` API comes from: Django's own (6.0 and later), else the
``django-tasks`` package (the backport DEP 14 was developed as, for Django 4.2 to 5.2 and
Python 3.11), which has the same classes under ``django_tasks``.

Why it exists: a backend subclasses the framework's ``BaseTaskBackend`` and builds its
``TaskResult``s; the backend and the worker must use the classes the project's ``@task``
decorator made, so both come from here, never imported by either name elsewhere.

What it is not: a shim over differences in behaviour; the two share the API this package uses
(``normalize_json``, whose home differs between versions, is this package's own).
The exception for an invalid task is ``InvalidTask`` in Django and ``InvalidTaskError`` in the
backport: it is ``InvalidTask`` here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

try:  # Django 6.0+: the framework itself
    from django.tasks import (  # type: ignore[attr-defined, unused-ignore]
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    SOURCE = "django.tasks"
except ImportError:  # the backport: pip install django-tasks
    from django_tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

    SOURCE = "django_tasks"

AnyTask = Task[Any, Any]


def normalize_json(value: Any) -> Any:
    """``value`` as the JSON types a ``TaskResult`` holds (mappings to dicts, sequences to lists,
    bytes to UTF-8 text), as the framework normalizes arguments and return values; anything
    else is a ``TypeError`` raised at enqueue (or when the task returns), not in the worker.
    Here rather than imported: the framework keeps its helper in a different module per
    version."""
    match value:
        case Mapping():
            return {normalize_json(k): normalize_json(v) for k, v in value.items()}
        case bytes():
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError("bytes that are not UTF-8 cannot be a task's JSON") from exc
        case str() | int() | float() | bool() | None:
            return value
        case Sequence():
            return [normalize_json(v) for v in value]
        case _:
            raise TypeError(f"a task's arguments and result must be JSON, got {type(value)}")


__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "SOURCE",
    "AnyTask",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
