"""``UjobsTaskBackend``: the ``django.tasks`` backend whose tasks are durable jobs in Postgres.

    TASKS = {"default": {"BACKEND": "ujobs_django.backend.UjobsTaskBackend"}}

Why it exists: ``django.tasks`` (DEP 14) defines ``@task``, ``enqueue``, ``aenqueue`` and
``get_result`` and leaves execution to a backend. Here ``task.enqueue(...)`` inserts one row of
the engine's ``x_jobs`` ON DJANGO'S OWN CONNECTION (``OPTIONS["DATABASE"]``, default
``"default"``, which must be the jobs database): inside ``transaction.atomic()`` the job exists
if and only if the block commits, with no ``on_commit`` dual write; outside one, Django's
autocommit commits it at once. A task's ``priority`` (higher runs first), ``run_after``,
``queue_name`` and arguments become the row's priority, run time, queue and input; the job's
name is the task's module path. ``get_result(id)`` reads the row, its attempts and its live lease
on the same connection and answers Django's ``TaskResult``: READY (waiting, also between
retries), RUNNING, SUCCESSFUL (``return_value``: the stored output), FAILED (``errors``: one
``TaskError`` per failed attempt, with the exception's class path and traceback). The bridge
worker (``manage.py ujobs_worker``) runs the tasks, found in each installed app's ``tasks``
module and in ``OPTIONS["MODULES"]`` (code is imported from settings, never by a name read
from a row).

Options (``OPTIONS``): ``DATABASE`` (Django alias), ``MODULES`` (extra modules holding tasks),
``MAX_ATTEMPTS`` (default 1: a task that raises is FAILED, as Django's semantics say; more
retries it with the engine's backoff, READY in between). ``QUEUES`` is Django's own list of
allowed queue names.

What it is not: a worker (``worker.py``) or a scheduler; and it needs Django on psycopg 3 (a
psycopg2 connection cannot carry the engine's insert and is refused with the fix).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from uuid import UUID

import psycopg
from django.db import connections, transaction
from django.utils import timezone

from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.ext.jobs import JobDefinition, RetryPolicy, queue_name
from ujobs_django import compat, db
from ujobs_django.compat import (
    AnyTask,
    BaseTaskBackend,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from ujobs_django.discovery import tasks_of_backend
from ujobs_django.worker import body_for

DEFAULT_MAX_ATTEMPTS = 1

# The engine's job states as django.tasks' result statuses.
STATUSES: dict[str, Any] = {
    "ready": TaskResultStatus.READY,
    "sleeping": TaskResultStatus.READY,
    "waiting": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "done": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

# Attempts given back by the worker itself (its drain, a database outage): not the task's.
UNCOUNTED_OUTCOMES = frozenset({"handed_back", "snoozed"})

# The last line of a Python traceback: ``module.Class: message`` (``Class`` alone for builtins).
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")
UNKNOWN_EXCEPTION = "ujobs_bridge.errors.UjobsError"
ABORTED_EXCEPTION = "ujobs_bridge.errors.AttemptAborted"


class UjobsTaskBackend(BaseTaskBackend):  # type: ignore[misc]
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options: dict[str, Any] = self.options
        self.database_alias: str = options.get("DATABASE", "default")
        self.modules: tuple[str, ...] = tuple(options.get("MODULES", ()))
        attempts = options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError(
                f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS'] is {attempts!r}",
                hint="set a whole number >= 1 (1: a task that raises is FAILED at once)",
                code=ErrorCode.CONFIG_INVALID,
            )
        self.max_attempts: int = attempts
        for name in self.queues:
            queue_name(name)  # a name the engine cannot hold fails at start-up, not at enqueue
        self._definitions: dict[str, JobDefinition[Any, Any]] = {}
        self._seen: dict[str, AnyTask] = {}

    # -- enqueue --------------------------------------------------------------------------------

    def enqueue(self, task: AnyTask, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        args = compat.normalize_json(list(args))
        kwargs = compat.normalize_json(dict(kwargs))
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):  # USE_TZ = False
            run_after = timezone.make_aware(run_after)
        call = self.definition(task).configure(
            conn=self.connection(),
            priority=task.priority,
            queue=task.queue_name,
            run_at=run_after,
        )
        wrapper = connections[self.database_alias]
        # as a query of Django's own: a database error is Django's (django.db.Error), and one
        # inside atomic() marks the block for rollback
        with (
            transaction.mark_for_rollback_on_error(self.database_alias),
            wrapper.wrap_database_errors,
        ):
            ref = call.enqueue(*args, **kwargs)
        self._seen.setdefault(task.module_path, task)
        result = TaskResult(
            task=task,
            id=str(ref.id),
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        compat.task_enqueued.send(type(self), task_result=result)
        return result

    def connection(self) -> psycopg.Connection[Any]:
        """Django's own psycopg 3 connection for ``DATABASE``, connected (in its transaction,
        when Django has one open)."""
        wrapper = connections[self.database_alias]
        wrapper.ensure_connection()
        raw = wrapper.connection
        if not isinstance(raw, psycopg.Connection):
            raise ConfigError(
                f"Django database {self.database_alias!r} uses {type(raw).__module__}, not "
                "psycopg 3: the job row cannot be written in Django's transaction",
                hint="pip install 'psycopg[binary]' (Django 4.2+ prefers it over psycopg2)",
                code=ErrorCode.CONFIG_INVALID,
            )
        return raw

    def definition(self, task: AnyTask) -> JobDefinition[Any, Any]:
        """The engine's job for ``task``: named by its module path, on its queue, with its
        priority and this backend's attempts; its body runs the task (``worker.run_task``)."""
        found = self._definitions.get(task.module_path)
        if found is not None:
            return found
        made: JobDefinition[Any, Any] = JobDefinition(
            body_for(self.alias, type(self), task),
            name=task.module_path,
            queue=queue_name(task.queue_name),
            priority=task.priority,
            retry=RetryPolicy(max_attempts=self.max_attempts),
            timeout_s=None,
            expires_s=None,
        )
        self._definitions[task.module_path] = made
        return made

    # -- results --------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        try:
            job_id = UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        with connections[self.database_alias].cursor() as cursor:
            row = db.task_row(cursor, job_id)
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        return self.result_of(row)

    def result_of(self, row: db.TaskRow) -> TaskResult:
        task = self.task_named(row.name)
        if row.queue != task.queue_name and row.queue in (self.queues or {row.queue}):
            task = task.using(queue_name=row.queue)  # enqueued with .using(queue_name=...)
        given = row.input or {}
        status = STATUSES.get(row.state, TaskResultStatus.READY)
        counted = [a for a in row.attempts if a.outcome not in UNCOUNTED_OUTCOMES]
        errors = [_task_error(a.error) for a in counted if a.error and a.outcome != "done"]
        if status == TaskResultStatus.FAILED and not errors and row.last_error:
            errors = [_task_error(row.last_error)]  # cancelled or expired before it ran
        started = [a.started_at for a in counted if a.started_at is not None]
        result = TaskResult(
            task=task,
            id=str(row.id),
            status=status,
            enqueued_at=row.created_at,
            started_at=started[0] if started else None,
            finished_at=row.finished_at if status in _FINISHED else None,
            last_attempted_at=started[-1] if started else None,
            args=list(given.get("args", [])),
            kwargs=dict(given.get("kwargs", {})),
            backend=self.alias,
            errors=errors,
            worker_ids=[a.worker or "" for a in counted],
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", row.output)
        return result

    def task_named(self, name: str) -> AnyTask:
        """The task whose module path is ``name``: one enqueued by this process, else one found
        in the modules this backend scans (never imported by the name itself)."""
        task = self._seen.get(name)
        if task is not None:
            return task
        for found in tasks_of_backend(self.alias, self.modules):
            self._seen.setdefault(found.module_path, found)
        task = self._seen.get(name)
        if task is None:
            raise ConfigError(
                f"no task {name!r} in the modules the {self.alias!r} task backend scans",
                hint="define it in an installed app's tasks.py, or add its module to "
                f"TASKS[{self.alias!r}]['OPTIONS']['MODULES']",
                code=ErrorCode.APP_NOT_FOUND,
            )
        return task

    def tasks(self) -> Iterable[AnyTask]:
        """Every task of this backend in the scanned modules (what the worker runs)."""
        return tasks_of_backend(self.alias, self.modules)


_FINISHED = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})


def _task_error(text: str) -> TaskError:
    return TaskError(exception_class_path=exception_path(text), traceback=text)


def exception_path(traceback_text: str) -> str:
    """The class path of the exception a stored traceback ends with: its last unindented line
    reads ``module.Class: message`` (``Class`` alone for a builtin: ``builtins.Class``)."""
    for line in reversed(traceback_text.strip().splitlines()):
        if not line or line[0].isspace():
            continue
        match = _EXCEPTION_LINE.match(line)
        if match is None or match.group(1) in ("Traceback", "During"):
            continue
        path = match.group(1)
        if path.startswith("UJ_"):  # the worker's own reason (``UJ_WORKER_LOST: ...``)
            return ABORTED_EXCEPTION
        return path if "." in path else f"builtins.{path}"
    return UNKNOWN_EXCEPTION
