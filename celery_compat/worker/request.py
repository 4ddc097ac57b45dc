"""The request a Celery worker builds for a message, and what its ``Request`` does around a run.

Why it exists: Celery's tracer (``celery.app.trace.trace_task``) runs a task with the request a
Celery worker would build from the message: headers, embed (chain, callbacks, errbacks, chord),
delivery info, properties, hostname. Here it is built from a claimed row (a protocol-v2
message, see ``message_row.py``), ``delivery_info['redelivered']`` set for a row claimed before
(``JobContext.redelivered``), and the time limits read as Celery's worker reads them (the
message's, else the task's, else the app's). What ``celery.worker.request.Request`` does
*around* the tracer is done here as it does it: ``task_received`` once a message is accepted;
REVOKED and ``task_revoked`` for a revoked, expired or terminated request; FAILURE
``TimeLimitExceeded`` with ``on_failure``, errbacks and ``task_failure`` at the hard time limit
(a killed child); FAILURE and ``task_failure`` for ``Reject(requeue=False)`` (Celery 5.7).

What it is not: the run that decides which of these happens (``execution.py``), the interrupt
of a running body (``interrupts.py``), or Celery's task events (``task_events.py``).
"""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

from billiard.einfo import ExceptionInfo
from celery import signals, states
from celery.app.task import Context
from celery.app.trace import task_has_custom
from celery.exceptions import Reject, TimeLimitExceeded

from ujobs_bridge.ext.jobs import node_name

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
HOSTNAME = f"celery@{socket.gethostname()}"  # outside a worker; a worker's is its node name


def hostname() -> str:
    """``self.request.hostname``: the node name of the worker running in this process (Celery's
    ``-n``, default ``celery@<host>``)."""
    return node_name() or HOSTNAME


def request_for(message: Any, redelivered: bool) -> dict[str, Any]:
    """The request dict Celery's worker hands the tracer: the headers, then the fields below,
    then the embed (callbacks, errbacks, chain, chord). A new dict whose ``properties`` is a
    copy: what the tracer's ``Context`` or a handler does to them leaves the message as it was."""
    headers = message.headers
    props = dict(message.properties)
    request: dict[str, Any] = dict(headers)
    request["args"] = message.args
    request["kwargs"] = message.kwargs
    request["hostname"] = hostname()
    request["is_eager"] = False
    request["properties"] = props
    request["reply_to"] = props.get("reply_to")
    request["correlation_id"] = props.get("correlation_id") or message.task_id
    request["delivery_info"] = {
        "exchange": "",
        "routing_key": message.queue,
        "priority": message.priority,  # 0 when sent with none, as Celery's Redis gives
        "redelivered": redelivered,  # claimed before: snoozed, rescued, handed back
    }
    custom = headers.keys() - PROTOCOL_HEADERS  # usually none: the protocol's own are left out
    request["headers"] = {k: v for k, v in headers.items() if k in custom} if custom else {}
    embed = message.embed
    if embed:
        request.update(embed)
    return request


def conf_limits(app: Any) -> tuple[Any, Any]:
    """The app's default ``(task_time_limit, task_soft_time_limit)``."""
    return app.conf.task_time_limit, app.conf.task_soft_time_limit


def time_limits(
    task: Any, headers: dict[str, Any], defaults: tuple[Any, Any] | None = None
) -> tuple[float | None, float | None]:
    """``(soft, hard)``: the message's ``timelimit``, else the task's, else the app's defaults
    (``defaults``: read once when the worker loaded the app, as Celery's worker reads them at
    start; ``None``: read now)."""
    hard, soft = None, None
    limit = headers.get("timelimit")
    if isinstance(limit, list | tuple) and len(limit) == 2:
        hard, soft = limit
    if (hard is None and not task.time_limit) or (soft is None and not task.soft_time_limit):
        conf_hard, conf_soft = conf_limits(task.app) if defaults is None else defaults
    else:
        conf_hard = conf_soft = None  # not consulted
    hard = hard if hard is not None else task.time_limit or conf_hard
    soft = soft if soft is not None else task.soft_time_limit or conf_soft
    return soft, hard


def _store_errors(task: Any, request: dict[str, Any]) -> bool:
    """Celery's ``Request.store_errors``: failures are stored unless results are ignored."""
    ignore = request.get("ignore_result")
    ignored = task.ignore_result if ignore is None else bool(ignore)
    return bool(task.store_errors_even_if_ignored) if ignored else True


def announce_revoked(
    task: Any, task_id: str, request: dict[str, Any], *, expired: bool, terminated: bool
) -> None:
    """What Celery's worker does for a revoked/expired/terminated request (``_announce_revoked``)."""
    ctx = Context(request)
    reason = "expired" if expired else "terminated" if terminated else "revoked"
    task.backend.mark_as_revoked(
        task_id, reason, request=ctx, store_result=_store_errors(task, request)
    )
    signals.task_revoked.send(
        sender=task,
        request=ctx,
        terminated=terminated,
        signum=15 if terminated else None,
        expired=expired,
    )


def announce_time_limit(task: Any, message: Any, request: dict[str, Any], limit: float) -> str:
    """What Celery's worker does when a body passes ``time_limit`` (``Request.on_timeout``):
    FAILURE with ``TimeLimitExceeded``, ``on_failure``, errbacks and ``task_failure``."""
    exc = TimeLimitExceeded(limit)
    ctx = Context(request)
    task.backend.mark_as_failure(
        message.task_id, exc, request=ctx, store_result=_store_errors(task, request)
    )
    try:
        raise exc
    except TimeLimitExceeded:
        einfo = ExceptionInfo()
    task.on_failure(exc, message.task_id, message.args, message.kwargs, einfo)
    if task_has_custom(task, "after_return"):
        task.after_return(states.FAILURE, exc, message.task_id, message.args, message.kwargs, None)
    signals.task_failure.send(
        sender=task,
        task_id=message.task_id,
        exception=exc,
        args=message.args,
        kwargs=message.kwargs,
        traceback=einfo.tb,
        einfo=einfo,
    )
    return f"TimeLimitExceeded({limit})"


def announce_rejected(task: Any, message: Any, request: dict[str, Any], rejection: Reject) -> None:
    """Celery 5.7's worker for ``Reject(requeue=False)``: the message is dropped and the task
    reads FAILURE (``task_failure`` sent), so it is never left PENDING forever."""
    try:
        raise rejection
    except Reject:
        einfo = ExceptionInfo()
    task.backend.mark_as_failure(
        message.task_id,
        rejection,
        request=Context(request),
        store_result=_store_errors(task, request),
    )
    signals.task_failure.send(
        sender=task,
        task_id=message.task_id,
        exception=rejection,
        args=message.args,
        kwargs=message.kwargs,
        traceback=einfo.tb,
        einfo=einfo,
    )


def announce_received(app: Any, task: Any, message: Any, request: dict[str, Any]) -> None:
    """``task_received`` as a Celery worker sends it once a message is accepted (not expired,
    not revoked), with Celery's own ``Request`` built from the row (``.id``, ``.stamps``,
    ``.errbacks``, ``.replaced_task_nesting`` ... read as they do on a Celery worker)."""
    if not signals.task_received.receivers:
        return

    # import cost: Celery's Request (a heavy import) loads only when task_received has receivers
    from celery.worker.request import Request

    body = (message.args, message.kwargs, message.embed or {})
    carrier = SimpleNamespace(
        headers=dict(message.headers),
        body=body,
        payload=body,
        delivery_info=request["delivery_info"],
        properties=request["properties"],
        content_type="application/json",
        content_encoding="utf-8",
    )
    try:
        received: Any = Request(
            carrier, app=app, task=task, hostname=hostname(), body=body, decoded=True
        )
    except Exception:  # a message Celery's Request cannot parse: handlers still get the fields
        received = Context(request)
    signals.task_received.send(sender=None, request=received)
