"""A Django project as the engine's worker and scheduler load it (``manage.py ujobs_worker`` /
``ujobs_scheduler``): the tasks of every ``UjobsTaskBackend`` in ``settings.TASKS``, the
database Django's settings name for them, and the engine ``task()``s declared beside the tasks.
With ``django_celery_beat`` in ``INSTALLED_APPS``, the scheduler also fires its ``PeriodicTask``
rows (``celery_compat.beat.django_beat``), sent through the project's celery_compat app (the one
Celery's Django guide creates in ``proj/celery.py``, loaded with the settings), on Django's
``default`` database; a project with no ``UjobsTaskBackend`` then still has a scheduler.

Why it exists: the engine's commands take ``-A`` and a DSN; a Django project has both already,
in its settings. This is the engine's ``LoadedApp`` built from them, so the worker and scheduler
run unchanged.

What it is not: the commands' flags (``management/commands``).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings

from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.ext.jobs import JobDefinition
from ujobs_bridge.ext.loaders import LoadedApp
from ujobs_bridge.ext.scheduling import PeriodicTask, TaskSource, tasks_from_module
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


def celery_beat_app() -> Any:
    """The project's celery_compat app when ``django_celery_beat`` is installed, else None."""
    if not apps.is_installed("django_celery_beat"):
        return None
    # optional: Celery and celery_compat load only for a project that uses django-celery-beat
    from celery import current_app

    # optional: (the same) the app class to check the project's app against
    from celery_compat import Celery

    app = current_app._get_current_object()
    if not isinstance(app, Celery):
        raise ConfigError(
            "django_celery_beat is installed, but no celery_compat app is loaded to send its "
            "periodic tasks",
            hint="create the app as Celery's Django guide says (proj/celery.py, imported by "
            "proj/__init__.py) with `from celery_compat import Celery`",
            code=ErrorCode.APP_NOT_FOUND,
        )
    return app


def database_url(backend: UjobsTaskBackend | None) -> str:
    """The DSN of the backend's Django database (``default`` without one; ``dsn.py``)."""
    return dsn_of(backend.database_alias if backend is not None else "default")


class DjangoTasksApp(LoadedApp):
    """The project's ``django.tasks`` tasks as the engine's app: jobs named by module path, on
    the database of the first ``UjobsTaskBackend``, with the ``task()``s of the same modules."""

    def __init__(self, *, beat: bool = False) -> None:
        super().__init__("django", None)
        self.backends: list[UjobsTaskBackend] = ujobs_backends()
        # ``beat``: for the scheduler, which fires django-celery-beat's rows when installed
        self.celery_app: Any = celery_beat_app() if beat else None

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
        if self.backends:
            return database_url(self.backends[0])
        return database_url(None) if self.celery_app is not None else None

    def task_source(self) -> TaskSource | None:
        if self.celery_app is None:
            return None
        # optional: celery_compat, only for a project that uses django-celery-beat
        from celery_compat.beat.django_beat import DjangoBeatSource

        return DjangoBeatSource(self.celery_app)

    def bind(self, dsn: str) -> None:
        """The celery_compat app's sends (django-celery-beat's rows) go to ``dsn``."""
        if self.celery_app is not None:
            # optional: celery_compat, only for a project that uses django-celery-beat
            from celery_compat.worker.loading import CeleryApp

            CeleryApp("django", None, self.celery_app).bind(dsn)
