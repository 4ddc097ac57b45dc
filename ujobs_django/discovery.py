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

from django.apps import apps
from django.utils.module_loading import module_has_submodule

from ujobs_django.compat import AnyTask, Task

TASKS_MODULE = "tasks"


def task_modules(extra: tuple[str, ...] = ()) -> list[ModuleType]:
    """Each installed app's ``tasks`` module (imported now if it exists), then ``extra``."""
    found: list[ModuleType] = []
    for config in apps.get_app_configs():
        if module_has_submodule(config.module, TASKS_MODULE):
            found.append(importlib.import_module(f"{config.name}.{TASKS_MODULE}"))
    found.extend(importlib.import_module(name) for name in extra)  # named by settings
    return found


def tasks_in(module: ModuleType) -> list[AnyTask]:
    """The ``django.tasks`` tasks among a module's attributes. The check reads each value's real
    type: ``isinstance`` asks a lazy object for its ``__class__``, and a Celery ``shared_task``
    proxy in the same ``tasks.py`` then resolves itself, raising ``NotRegistered`` when its app
    does not hold the task."""
    return [value for value in vars(module).values() if issubclass(type(value), Task)]


def tasks_of_backend(alias: str, modules: tuple[str, ...] = ()) -> list[AnyTask]:
    """The tasks bound to the backend ``alias`` in the scanned modules (the apps' and
    ``modules``), one per module path."""
    out: dict[str, AnyTask] = {}
    for module in task_modules(modules):
        for task in tasks_in(module):
            if task.backend == alias:
                out.setdefault(task.module_path, task)
    return list(out.values())
