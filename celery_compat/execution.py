"""Run Celery tasks on the bridge worker: one job definition per registered task name.

Why it exists: ``ujobs-bridge worker -A proj`` must run a Celery app's tasks with Celery's own
semantics, so a claimed row (a protocol-v2 message, see ``message_row.py``) is handed to
Celery's tracer (``celery.app.trace.trace_task``) with the request a Celery worker would build:
headers, embed (chain, callbacks, errbacks, chord), delivery info, properties. The tracer fires
``task_prerun``/``postrun``/``success``/``failure``/``retry``, stores results, runs callbacks
and continues chains, exactly as in a Celery worker. What a Celery worker does *around* the
tracer is done here: expiry (REVOKED, ``task_revoked(expired=True)``), time limits and
``terminate`` (``interrupts.py``), ``Reject`` (requeue or drop).

How a run ends, for the job row: SUCCESS, RETRY (the retry is a new row, sent by
``self.retry``), IGNORED → ``done``; FAILURE → ``dead`` with the traceback (Celery's retries are
Celery's, so the engine never retries a task that failed); ``Reject(requeue=True)`` → ready
again; revoked/expired → ``cancelled``. The engine's own attempts (``ujobs_max_deliveries``)
count only claims whose worker died: Celery would have lost those messages (ack before run).

What it is not: the worker loop or the lease keeper (``ujobs_bridge.worker``).
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Any

from celery import signals, states
from celery.app.trace import trace_task
from celery.exceptions import Reject, TaskRevokedError

from ujobs_bridge.context import current_job
from ujobs_bridge.job import JobDefinition
from ujobs_bridge.outcomes import Cancel, Discard, Snooze
from ujobs_bridge.retry import RetryPolicy

from .interrupts import INTERRUPTER
from .message_row import from_input, is_celery_input

PROTOCOL_HEADERS = frozenset(
    {
        "lang",
        "task",
        "id",
        "shadow",
        "eta",
        "expires",
        "group",
        "group_index",
        "retries",
        "timelimit",
        "root_id",
        "parent_id",
        "argsrepr",
        "kwargsrepr",
        "origin",
        "ignore_result",
        "replaced_task_nesting",
        "stamped_headers",
        "stamps",
        "chord",
    }
)
HOSTNAME = f"ujobs@{socket.gethostname()}"


class CeleryTaskFailed(Exception):
    """The task ended in FAILURE: the row goes to ``dead`` with Celery's traceback."""


class _NeverRetried(Exception):
    """The engine retry policy of Celery tasks matches nothing: Celery decides retries."""


def _request(message: Any, attempt: int) -> dict[str, Any]:
    headers = dict(message.headers)
    props = dict(message.properties)
    request: dict[str, Any] = dict(headers)
    request.update(
        {
            "args": message.args,
            "kwargs": message.kwargs,
            "hostname": HOSTNAME,
            "is_eager": False,
            "properties": props,
            "reply_to": props.get("reply_to"),
            "correlation_id": props.get("correlation_id") or message.task_id,
            "delivery_info": {
                "exchange": "",
                "routing_key": message.queue,
                "priority": props.get("priority"),
                "redelivered": attempt > 1,
            },
            "headers": {k: v for k, v in headers.items() if k not in PROTOCOL_HEADERS},
        }
    )
    request.update(message.embed or {})
    return request


def _limits(task: Any, headers: dict[str, Any]) -> tuple[float | None, float | None]:
    hard, soft = None, None
    limit = headers.get("timelimit")
    if isinstance(limit, list | tuple) and len(limit) == 2:
        hard, soft = limit
    hard = hard if hard is not None else task.time_limit or task.app.conf.task_time_limit
    soft = soft if soft is not None else task.soft_time_limit or task.app.conf.task_soft_time_limit
    return soft, hard


def _revoke(
    task: Any, task_id: str, request: dict[str, Any], *, expired: bool, terminated: bool
) -> None:
    from celery.app.task import Context

    ctx = Context(request)
    reason = "expired" if expired else "terminated" if terminated else "revoked"
    if not task.ignore_result or expired or terminated:
        task.backend.mark_as_revoked(task_id, reason, request=ctx)
    signals.task_revoked.send(
        sender=task,
        request=ctx,
        terminated=terminated,
        signum=15 if terminated else None,
        expired=expired,
    )


def run_message(app: Any, name: str, value: Any) -> dict[str, str]:
    """Execute one claimed Celery message; returns the row's small output ``{"state": ...}``."""
    ctx = current_job()
    if not is_celery_input(value):
        raise Discard(f"row input is not a Celery message (task {name!r})")
    message = from_input(value, queue=ctx.queue)
    task = app.tasks[name]
    request = _request(message, ctx.attempt)
    expires = message.expires
    if expires is not None and expires <= datetime.now(UTC):
        _revoke(task, message.task_id, request, expired=True, terminated=False)
        raise Cancel(f"task {message.task_id} expired at {expires.isoformat()}")
    soft, hard = _limits(task, message.headers)
    watched = INTERRUPTER.watch(ctx.signal, soft, hard)
    try:
        result, info, _runtime, _rstr = trace_task(
            task,
            message.task_id,
            message.args,
            message.kwargs,
            request,
            app=app,
            hostname=HOSTNAME,
        )
    except Reject as exc:
        INTERRUPTER.unwatch(watched)
        if exc.requeue:
            raise Snooze(0) from exc
        raise Discard(f"rejected: {exc.reason!r}") from exc
    finally:
        INTERRUPTER.unwatch(watched)
    if "terminate" in watched.fired:
        _revoke(task, message.task_id, request, expired=False, terminated=True)
        raise Cancel(f"task {message.task_id} terminated by revoke")
    state = states.SUCCESS if info is None else info.state
    if state == states.FAILURE:
        einfo = getattr(info, "retval", None)
        text = getattr(einfo, "traceback", None) or repr(getattr(einfo, "exception", result))
        raise CeleryTaskFailed(text)
    if state == states.REJECTED:
        rejection = getattr(getattr(info, "retval", None), "exception", None)
        if isinstance(rejection, Reject) and rejection.requeue:
            raise Snooze(0)
        raise Discard(f"rejected: {rejection!r}")
    return {"state": state}


def _runner(app: Any, name: str) -> Any:
    def run(value: Any) -> dict[str, str]:
        return run_message(app, name, value)

    run.__name__ = run.__qualname__ = f"celery_task[{name}]"
    return run


def _queue_of(app: Any, name: str, task: Any) -> str:
    """The queue Celery would route ``name`` to (task ``queue``, ``task_routes``, default)."""
    options = app.amqp.router.route({}, name, (), {}, task)
    queue = options.get("queue")
    return str(getattr(queue, "name", None) or queue or app.conf.task_default_queue or "celery")


def jobs_for_app(app: Any) -> list[JobDefinition[Any, Any]]:
    """One job definition per task of ``app`` (its modules imported, the app finalized)."""
    app.loader.import_default_modules()
    app.finalize(auto=True)
    max_attempts = int(app.conf.get("ujobs_max_deliveries") or 3)
    policy = RetryPolicy(max_attempts=max_attempts, retry_on=(_NeverRetried,))
    out: list[JobDefinition[Any, Any]] = []
    for name, task in sorted(app.tasks.items()):
        out.append(
            JobDefinition(
                _runner(app, name),
                name=name,
                queue=_queue_of(app, name, task),
                priority=0,
                retry=policy,
                timeout_s=None,
                expires_s=None,
            )
        )
    return out


__all__ = ["CeleryTaskFailed", "TaskRevokedError", "jobs_for_app", "run_message"]
