"""How the bridge worker runs ``django.tasks`` tasks: each task's job body, and the ``LoadedApp``
that hands a Django project's tasks, database and engine ``task()``s to the worker and the
scheduler (``manage.py ujobs_worker`` / ``ujobs_scheduler``).

Why it exists: a job body of the engine is a function of the row's arguments; a Django task
wants Django's connection hygiene around it (``close_old_connections``, as a request gets), its
``TaskContext`` when it ``takes_context``, its return value made JSON as Django makes it, and
the ``task_started`` / ``task_finished`` signals. A task that raises fails the attempt with the
exception itself, so the engine stores its traceback and retries or dead-letters it by the
backend's ``MAX_ATTEMPTS``.

What it is not: the worker loop (the engine's) or the command line (``management/``).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from ujobs_bridge import current_job
from ujobs_bridge.ext.jobs import JobDefinition, node_name
from ujobs_bridge.ext.loaders import LoadedApp
from ujobs_bridge.ext.scheduling import PeriodicTask, tasks_from_module
from ujobs_django import compat
from ujobs_django.compat import AnyTask, TaskContext, TaskResult, TaskResultStatus
from ujobs_django.discovery import task_modules, ujobs_backends

if TYPE_CHECKING:
    from ujobs_django.backend import UjobsTaskBackend


def body_for(backend: UjobsTaskBackend, task: AnyTask) -> Callable[..., Any]:
    """The job body of ``task``: runs it as Django's worker contract says."""

    def run_django_task(*args: Any, **kwargs: Any) -> Any:
        return run_task(backend, task, list(args), dict(kwargs))

    run_django_task.__qualname__ = run_django_task.__name__ = f"run {task.module_path}"
    return run_django_task


def run_task(backend: UjobsTaskBackend, task: AnyTask, args: list[Any], kwargs: dict[str, Any]) -> Any:
    from django.utils import timezone  # configured: the worker set Django up

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
        backend=backend.alias,
        errors=[],
        worker_ids=[node_name()] * max(job.attempt, 1),
    )
    _close_old_connections()
    compat.task_started.send(type(backend), task_result=result)
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
        compat.task_finished.send(type(backend), task_result=result)
        raise
    finally:
        _close_old_connections()
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    compat.task_finished.send(type(backend), task_result=result)
    return value


def _close_old_connections() -> None:
    """Django's per-request hygiene around a body (connections past ``CONN_MAX_AGE`` or broken
    are closed), skipped while this thread is inside ``atomic()`` (a test performing a task in
    its own transaction), whose connection must stay."""
    from django.db import close_old_connections, connections

    if any(c.in_atomic_block for c in connections.all(initialized_only=True)):
        return
    close_old_connections()


def database_url(backend: UjobsTaskBackend) -> str:
    """The DSN of the backend's Django database, from Django's own connection parameters (the
    libpq keywords among them: host, port, dbname, user, password, sslmode ...)."""
    from django.db import connections

    params = connections[backend.database_alias].get_connection_params()
    keywords = {d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()}
    given = {
        k: v
        for k, v in params.items()
        if k in keywords and isinstance(v, str | int) and not isinstance(v, bool) and v != ""
    }
    return psycopg.conninfo.make_conninfo(**given)


class DjangoTasksApp(LoadedApp):
    """A Django project as the engine's worker and scheduler see it: the tasks of every
    ``UjobsTaskBackend`` in ``settings.TASKS``, on the database of the first, and the engine
    ``task()``s declared in the same scanned modules."""

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
