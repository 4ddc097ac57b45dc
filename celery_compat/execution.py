"""Run Celery tasks on the bridge worker: one job definition per registered task name.

Why it exists: ``ujobs-bridge worker -A proj`` must run a Celery app's tasks with Celery's own
semantics, so a claimed row (a protocol-v2 message, see ``message_row.py``) is handed to
Celery's tracer (``celery.app.trace.trace_task``) with the request a Celery worker would build:
headers, embed (chain, callbacks, errbacks, chord), delivery info, properties. The tracer fires
``task_prerun``/``postrun``/``success``/``failure``/``retry``, stores results, runs callbacks
and continues chains, exactly as in a Celery worker. What a Celery worker does *around* the
tracer is done here, as ``celery.worker.request.Request`` does it: expiry (REVOKED,
``task_revoked(expired=True)``); a revoke that arrived after the claim but before the body
(REVOKED, ``task_revoked``; ``revoked_ids.py``); ``delivery_info['redelivered']`` for a row
claimed before (``JobContext.redelivered``); the hard time limit (FAILURE ``TimeLimitExceeded``,
``on_failure``, errbacks, ``task_failure``) and ``terminate`` (REVOKED, ``task_revoked``, no
``task_failure``), both as for a killed child (``interrupts.py``); ``Reject``; ``result.get()``
refused inside a body (``allow_join_result()`` still works); and a task's own retry message is
sent only after the tracer stored RETRY, so a fast retry's SUCCESS is never overwritten. Under
``-E`` each of those moments also sends Celery's task event (``task_events.py``).

How a run ends, for the job row: SUCCESS, RETRY (the retry is a new row, sent by
``self.retry``), IGNORED → ``done``; FAILURE → ``dead`` with the traceback (Celery's retries are
Celery's, so the engine never retries a task that failed); ``Reject(requeue=True)`` → ready
again; ``Reject(requeue=False)`` → ``dead``, the task reads FAILURE (Celery 5.7); revoked,
expired, terminated → ``cancelled``. The engine's own attempts (``ujobs_max_deliveries``)
count only claims whose worker died: Celery would have lost those messages (ack before run).

What it is not: the worker loop or the lease keeper (``ujobs_bridge.worker``).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
from collections.abc import Iterator
from typing import Any

import celery._state as celery_state
import celery.result as celery_result
from billiard.einfo import ExceptionInfo
from celery import signals, states
from celery.app.trace import trace_task
from celery.exceptions import Reject, TaskRevokedError, TimeLimitExceeded

from ujobs_bridge.context import current_job, node_name
from ujobs_bridge.faults import fault
from ujobs_bridge.job import JobDefinition
from ujobs_bridge.outcomes import Cancel, Discard, Snooze
from ujobs_bridge.retry import RetryPolicy

from . import rate_limit, revoked_ids, stamp_revokes, task_events
from .db import revocations
from .interrupts import INTERRUPTER, BodyKilled
from .message_row import from_input, is_celery_input
from .outage import forget_outage, outage_handed_back, raise_if_outage, stored
from .send_keys import running_body

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


def task_registry(app: Any) -> Any:
    """``app.tasks`` without its lock: Celery's ``tasks`` is kombu's ``cached_property``, whose
    every read takes ONE ``RLock`` shared by all apps, so the worker's body threads queued on it
    for each message. Once computed the registry sits in the app's ``__dict__`` (read it there);
    before that, the property finalizes the app as usual."""
    registry = app.__dict__.get("tasks")
    return registry if registry is not None else app.tasks


def hostname() -> str:
    """``self.request.hostname``: the node name of the worker running in this process (Celery's
    ``-n``, default ``celery@<host>``)."""
    return node_name() or HOSTNAME


class CeleryTaskFailed(Exception):
    """The task ended in FAILURE: the row goes to ``dead`` with Celery's traceback."""


class _NeverRetried(Exception):
    """The engine retry policy of Celery tasks matches nothing: Celery decides retries."""


# -- result.get() inside a task ------------------------------------------------------------------
# A Celery worker process sets ``task_join_will_block`` so ``result.get()`` inside a task raises
# (``disable_sync_subtasks``) unless wrapped in ``allow_join_result()``. Bridge bodies share the
# process with whatever else runs there (an app's web threads, tests), so the flag is kept per
# body thread: ``celery.result``'s two names are replaced by thread-aware ones that fall back to
# Celery's process-wide flag outside a body.
_JOINS = threading.local()


def _join_will_block() -> bool:
    value = getattr(_JOINS, "will_block", None)
    return bool(celery_state.task_join_will_block() if value is None else value)


def _set_join_will_block(blocks: bool) -> None:
    if getattr(_JOINS, "will_block", None) is None:
        celery_state._set_task_join_will_block(blocks)
    else:
        _JOINS.will_block = bool(blocks)


def _install_join_guard() -> None:
    celery_result.task_join_will_block = _join_will_block
    celery_result._set_task_join_will_block = _set_join_will_block


@contextlib.contextmanager
def joins_will_block() -> Iterator[None]:
    """Inside a task body: ``result.get()`` raises, as in a Celery worker."""
    previous = getattr(_JOINS, "will_block", None)
    _JOINS.will_block = True
    try:
        yield
    finally:
        _JOINS.will_block = previous


_install_join_guard()


def _request(message: Any, redelivered: bool) -> dict[str, Any]:
    headers = dict(message.headers)
    props = dict(message.properties)
    request: dict[str, Any] = dict(headers)
    request.update(
        {
            "args": message.args,
            "kwargs": message.kwargs,
            "hostname": hostname(),
            "is_eager": False,
            "properties": props,
            "reply_to": props.get("reply_to"),
            "correlation_id": props.get("correlation_id") or message.task_id,
            "delivery_info": {
                "exchange": "",
                "routing_key": message.queue,
                "priority": props.get("priority"),
                "redelivered": redelivered,  # claimed before: snoozed, rescued, handed back
            },
            "headers": {k: v for k, v in headers.items() if k not in PROTOCOL_HEADERS},
        }
    )
    request.update(message.embed or {})
    return request


def conf_limits(app: Any) -> tuple[Any, Any]:
    """The app's default ``(task_time_limit, task_soft_time_limit)``."""
    return app.conf.task_time_limit, app.conf.task_soft_time_limit


def _limits(
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


def _revoke(
    task: Any, task_id: str, request: dict[str, Any], *, expired: bool, terminated: bool
) -> None:
    """What Celery's worker does for a revoked/expired/terminated request (``_announce_revoked``)."""
    from celery.app.task import Context

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


def _hard_time_limit(task: Any, message: Any, request: dict[str, Any], limit: float) -> str:
    """What Celery's worker does when a body passes ``time_limit`` (``Request.on_timeout``):
    FAILURE with ``TimeLimitExceeded``, ``on_failure``, errbacks and ``task_failure``."""
    from celery.app.task import Context
    from celery.app.trace import task_has_custom

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


def _rejected(task: Any, message: Any, request: dict[str, Any], rejection: Reject) -> None:
    """Celery 5.7's worker for ``Reject(requeue=False)``: the message is dropped and the task
    reads FAILURE (``task_failure`` sent), so it is never left PENDING forever."""
    from celery.app.task import Context

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


def _terminates(app: Any, task_id: str) -> bool:
    """A cancel under a running body: ``revoke(terminate=True)`` or an operator's ``jobs
    cancel`` interrupts it; a plain ``revoke()`` lets a started task finish, as in Celery."""
    with app.ujobs_client.pool.connection() as conn:
        flag = revocations.revoked_terminate(conn, task_id)
    return flag is None or flag


def _received(app: Any, task: Any, message: Any, request: dict[str, Any]) -> None:
    """``task_received`` as a Celery worker sends it once a message is accepted (not expired,
    not revoked), with Celery's own ``Request`` built from the row (``.id``, ``.stamps``,
    ``.errbacks``, ``.replaced_task_nesting`` ... read as they do on a Celery worker)."""
    if not signals.task_received.receivers:
        return
    from types import SimpleNamespace

    from celery.app.task import Context
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


def run_message(
    app: Any, name: str, value: Any, limits: tuple[Any, Any] | None = None
) -> dict[str, str]:
    """Execute one claimed Celery message; returns the row's small output ``{"state": ...}``.
    ``limits``: the app's default time limits as ``conf_limits`` read them (else read now)."""
    ctx = current_job()
    if not is_celery_input(value):
        raise Discard(f"row input is not a Celery message (task {name!r})")
    app.set_current()  # shared_task proxies called from this body resolve to this app
    message = from_input(value, queue=ctx.queue, job_id=ctx.id)
    task = task_registry(app)[name]
    request = _request(message, ctx.redelivered)
    events = task_events.node(task)  # None: events off (the common case costs one check)
    expires = message.expires
    if expires is not None and expires <= ctx.clock.now():
        _revoke(task, message.task_id, request, expired=True, terminated=False)
        if events:
            task_events.revoked(events, message.task_id, expired=True, terminated=False)
        raise Cancel(f"task {message.task_id} expired at {expires.isoformat()}")
    if revoked_ids.REVOKED.is_revoked(app, message.task_id) or (  # claimed, then revoked
        stamp_revokes.revoking_header(message.headers) is not None  # a stamped-header revoke
    ):
        _revoke(task, message.task_id, request, expired=False, terminated=False)
        if events:
            task_events.revoked(events, message.task_id, expired=False, terminated=False)
        raise Cancel(f"task {message.task_id} revoked before it started")
    rate_limit.take_or_snooze(app, task, ctx)
    _received(app, task, message, request)
    if events:
        task_events.received(events, message)
        task_events.started(events, message.task_id)
    soft, hard = _limits(task, message.headers, limits)
    watched = INTERRUPTER.watch(
        ctx.signal, soft, hard, should_terminate=lambda: _terminates(app, message.task_id)
    )
    traced: Any = None
    rejection: Reject | None = None
    forget_outage()
    with running_body(ctx.id, message.task_id) as held:
        try:
            with joins_will_block():
                try:
                    traced = trace_task(
                        task,
                        message.task_id,
                        message.args,
                        message.kwargs,
                        request,
                        app=app,
                        hostname=hostname(),
                    )
                finally:
                    INTERRUPTER.unwatch(watched)
        except BodyKilled:
            pass  # what killed it is in watched.fired
        except Reject as exc:  # raised outside the body (by the tracer's own hooks)
            rejection = exc
    for retry, key in held:  # RETRY is stored now: the retry may run and store its own outcome
        # Keyed, so safe to repeat: retried through an outage like the result writes.
        stored(app.ujobs_client, functools.partial(_insert_held, app, retry, key))
        fault("celery.after_held_send")  # a worker dying here replays the send on redelivery
    if traced is None and rejection is None:  # killed: what Celery does for a killed child
        if "terminate" in watched.fired:
            _revoke(task, message.task_id, request, expired=False, terminated=True)
            if events:
                task_events.revoked(events, message.task_id, expired=False, terminated=True)
            raise Cancel(f"task {message.task_id} terminated by revoke")
        limit_text = _hard_time_limit(task, message, request, float(hard or 0))
        if events:
            task_events.failed(events, message.task_id, TimeLimitExceeded(hard), limit_text)
        raise CeleryTaskFailed(limit_text)
    if events and traced is not None:
        task_events.traced(events, message.task_id, traced)
    if traced is not None:
        result, info = traced[0], traced[1]
        state = states.SUCCESS if info is None else info.state
        if state == states.FAILURE:  # the tracer returns (ExceptionInfo, Info(FAILURE, exc))
            raise_if_outage(message.task_id)  # a result store that met an outage: not a FAILURE
            text = getattr(result, "traceback", None) or repr(getattr(info, "retval", result))
            raise CeleryTaskFailed(text)
        if state != states.REJECTED:
            return {"state": state}
        retval = getattr(info, "retval", None)
        rejection = retval if isinstance(retval, Reject) else Reject(retval, requeue=False)
    assert rejection is not None
    if events:
        task_events.rejected(events, message.task_id, rejection, traced)
    if rejection.requeue:
        raise Snooze(0)
    _rejected(task, message, request, rejection)
    raise Discard(f"rejected: {rejection.reason!r}")


def _runner(app: Any, name: str) -> Any:
    limits = conf_limits(app)  # once per worker, as Celery's WorkController does

    def run(value: Any) -> dict[str, str]:
        with outage_handed_back(name):  # a revoke/expiry/limit store that met an outage
            return run_message(app, name, value, limits)

    run.__name__ = run.__qualname__ = f"celery_task[{name}]"
    return run


def _insert_held(app: Any, message: Any, key: Any, conn: Any) -> None:
    app.amqp.insert_now(message, conn, key=key)


def _queue_of(app: Any, name: str, task: Any) -> str:
    """The queue Celery would route ``name`` to: the task's own ``queue=`` (which Celery's
    ``apply_async`` passes to the router as an option, so it wins over ``task_routes``), else
    ``task_routes``, else the default queue."""
    own = getattr(task, "queue", None)
    options = app.amqp.router.route({"queue": own} if own else {}, name, (), {}, task)
    queue = options.get("queue")
    return str(getattr(queue, "name", None) or queue or app.conf.task_default_queue or "celery")


def jobs_for_app(app: Any) -> list[JobDefinition[Any, Any]]:
    """One job definition per task of ``app`` (its modules imported, the app finalized). The
    worker that runs them keeps the revoked ids current when given ``revoked_ids.channel()``
    (``loading.py`` does); without it each request asks the table."""
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
