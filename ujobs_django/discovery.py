"""Where a worker and a result reader find the ``django.tasks`` tasks of a backend: the
``tasks`` module of every installed app (as Celery's ``autodiscover_tasks`` finds ``tasks.py``)
plus the modules the backend's ``OPTIONS["MODULES"]`` names, scanned for ``Task`` objects bound
to the backend's alias.

Why it exists: the worker must know every task it may run before it claims a row, and the
project never imports code by a name read from data (a row's task path). Settings name the
code; the scan is the registry, as the engine's ``-A`` scan is for ``@job`` functions.

What it is not: global state. Declaring a ``@task`` registers nothing.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ujobs_django.compat import AnyTask, Task

if TYPE_CHECKING:
    from ujobs_django.backend import UjobsTaskBackend

TASKS_MODULE = "tasks"


def task_modules(extra: tuple[str, ...] = ()) -> list[ModuleType]:
    """Each installed app's ``tasks`` module (imported now if it exists), then ``extra``."""
    from django.apps import apps  # Django is configured when a backend exists
    from django.utils.module_loading import module_has_submodule

    found: list[ModuleType] = []
    for config in apps.get_app_configs():
        if module_has_submodule(config.module, TASKS_MODULE):
            found.append(importlib.import_module(f"{config.name}.{TASKS_MODULE}"))
    found.extend(importlib.import_module(name) for name in extra)  # named by settings
    return found


def tasks_in(module: ModuleType) -> list[AnyTask]:
    return [value for value in vars(module).values() if isinstance(value, Task)]


def tasks_of_backend(backend: UjobsTaskBackend) -> list[AnyTask]:
    """The tasks bound to ``backend``'s alias in the scanned modules, one per module path."""
    out: dict[str, AnyTask] = {}
    for module in task_modules(backend.modules):
        for task in tasks_in(module):
            if task.backend == backend.alias:
                out.setdefault(task.module_path, task)
    return list(out.values())


def ujobs_backends() -> list[Any]:
    """Every backend of ``settings.TASKS`` that is a ``UjobsTaskBackend``, in alias order."""
    from django.conf import settings  # configured by now

    from ujobs_django.backend import UjobsTaskBackend
    from ujobs_django.compat import task_backends

    aliases = sorted(getattr(settings, "TASKS", {}) or {})
    return [
        task_backends[alias]
        for alias in aliases
        if isinstance(task_backends[alias], UjobsTaskBackend)
    ]
