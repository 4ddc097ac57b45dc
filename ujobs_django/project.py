"""A Django project as the engine's worker and scheduler load it (``manage.py ujobs_worker`` /
``ujobs_scheduler``): the tasks of every ``UjobsTaskBackend`` in ``settings.TASKS``, the
database Django's settings name for them, and the engine ``task()``s declared beside the tasks.

Why it exists: the engine's commands take ``-A`` and a DSN; a Django project has both already,
in its settings. This is the engine's ``LoadedApp`` built from them, so the worker and scheduler
run unchanged.

What it is not: the commands' flags (``management/commands``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from ujobs_bridge.ext.jobs import JobDefinition
from ujobs_bridge.ext.loaders import LoadedApp
from ujobs_bridge.ext.scheduling import PeriodicTask, tasks_from_module
from ujobs_django.backend import UjobsTaskBackend
from ujobs_django.compat import task_backends
from ujobs_django.discovery import task_modules
from ujobs_django.dsn import dsn_of


def ujobs_backends() -> list[UjobsTaskBackend]:
    """Every backend of ``settings.TASKS`` that is a ``UjobsTaskBackend``, in alias order."""
    aliases = sorted(getattr(settings, "TASKS", None) or {})
    return [
        task_backends[alias]
        for alias in aliases
        if isinstance(task_backends[alias], UjobsTaskBackend)
    ]


def database_url(backend: UjobsTaskBackend) -> str:
    """The DSN of the backend's Django database (``dsn.py``)."""
    return dsn_of(backend.database_alias)


class DjangoTasksApp(LoadedApp):
    """The project's ``django.tasks`` tasks as the engine's app: jobs named by module path, on
    the database of the first ``UjobsTaskBackend``, with the ``task()``s of the same modules."""

    def __init__(self) -> None:
        super().__init__("django", None)
        self.backends: list[UjobsTaskBackend] = ujobs_backends()

    def jobs(self) -> list[JobDefinition[Any, Any]]:
        return [b.definition(t) for b in self.backends for t in b.tasks()]

    def queues(self) -> tuple[str, ...]:
        """What the worker consumes when no ``-Q`` is given: every backend's ``QUEUES``, and
        every queue a task declares."""
        names = {q for b in self.backends for q in b.queues}
        names.update(t.queue_name for b in self.backends for t in b.tasks())
        return tuple(sorted(names))

    def periodic_tasks(self) -> dict[str, PeriodicTask]:
        found: dict[str, PeriodicTask] = {}
        extra = tuple(m for b in self.backends for m in b.modules)
        for module in task_modules(extra):
            found.update(tasks_from_module(module))
        return found

    def database_url(self) -> str | None:
        return database_url(self.backends[0]) if self.backends else None
