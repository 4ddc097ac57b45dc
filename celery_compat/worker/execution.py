"""Run Celery tasks on the bridge worker: one job definition per registered task name.

Why it exists: ``ujobs-bridge worker -A proj`` must run a Celery app's tasks with Celery's own
semantics, so a claimed row (a protocol-v2 message, see ``message_row.py``) is handed to
Celery's tracer (``celery.app.trace.trace_task``) with the request a Celery worker would build
(``worker_request.py``). The tracer fires ``task_prerun``/``postrun``/``success``/``failure``/
``retry``, stores results, runs callbacks and continues chains, exactly as in a Celery worker.
What a Celery worker does *around* the tracer is decided here, as ``celery.worker.request.Request``
decides it, and recorded as it records it (``worker_request.py``): expiry (REVOKED,
``task_revoked(expired=True)``); a revoke that arrived after the claim but before the body
(REVOKED, ``task_revoked``; ``revoked_ids.py``); the hard time limit (FAILURE
``TimeLimitExceeded``, ``on_failure``, errbacks, ``task_failure``) and ``terminate`` (REVOKED,
``task_revoked``, no ``task_failure``), both as for a killed child (``interrupts.py``; in a
``-P prefork`` child the pool signals the soft limit and kills the child at the hard one, and
the worker records the FAILURE: ``killed_at_time_limit``, as Celery's main process does);
``Reject``; ``result.get()`` refused inside a body (``join_guard.py``); the attempt's start,
recorded just before the task's function runs, after Celery's prologue (``work_start.py``: a
worker killed in the prologue is not charged for the task); and a task's own retry
message is sent only after the tracer stored RETRY, so a fast retry's SUCCESS is never
overwritten. Under ``-E`` each of those moments also sends Celery's task event
(``task_events.py``).

How a run ends, for the job row: SUCCESS, RETRY (the retry is a new row, sent by
``self.retry``), IGNORED → ``done``; FAILURE → ``dead`` with the traceback and the failure kind ``FAILURE``
(Celery's retries are Celery's, so the engine never retries a task that failed, and no view
counts it as a dead letter); ``Reject(requeue=True)`` → ready
again; ``Reject(requeue=False)`` → ``dead``, the task reads FAILURE (Celery 5.7); revoked,
expired, terminated → ``cancelled``. The engine's own attempts (``ujobs_max_deliveries``)
count only claims whose worker died: Celery would have lost those messages (ack before run).

What it is not: the worker loop or the lease keeper (``ujobs_bridge._internal.worker``), the request and
what Celery's ``Request`` records (``worker_request.py``), or the ``result.get()`` guard
(``join_guard.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from celery import states
from celery.app.trace import trace_task
from celery.exceptions import Reject, TaskRevokedError, TimeLimitExceeded
from kombu.utils.encoding import safe_repr

from celery_compat.backend.outage import forget_outage, outage_handed_back, raise_if_outage, stored
from celery_compat.db import revocations
from celery_compat.events import task_events
from celery_compat.sending.message_row import from_input, is_celery_input
from celery_compat.sending.send_keys import running_body
from celery_compat.worker import rate_limit, revoked_ids, stamp_revokes, work_start
from celery_compat.worker.interrupts import INTERRUPTER, SOFT, BodyKilled
from celery_compat.worker.join_guard import joins_will_block
from celery_compat.worker.request import (
    announce_received,
    announce_rejected,
    announce_revoked,
    announce_time_limit,
    conf_limits,
    hostname,
    request_for,
    time_limits,
)
from ujobs_bridge.ext.jobs import (
    Cancel,
    Discard,
    Fail,
    JobDefinition,
    RetryPolicy,
    Snooze,
    current_job,
)
from ujobs_bridge.ext.worker import fault, limits_kept_by_pool, pool_time_limits
from ujobs_bridge.records import ClaimedJob


def task_registry(app: Any) -> Any:
    """``app.tasks`` without its lock: Celery's ``tasks`` is kombu's ``cached_property``, whose
    every read takes ONE ``RLock`` shared by all apps, so the worker's body threads queued on it
    for each message. Once computed the registry sits in the app's ``__dict__`` (read it there);
    before that, the property finalizes the app as usual."""
    registry = app.__dict__.get("tasks")
    return registry if registry is not None else app.tasks


def task_failed(text: str) -> Fail:
    """The task ended in FAILURE: the row ends ``dead`` with Celery's traceback, its failure kind
    ``FAILURE`` (what the dashboard, ``/metrics`` and ``jobs`` show), never a dead letter: Celery
    decided its retries, none are left."""
    return Fail(text, states.FAILURE)


class _NeverRetried(Exception):
    """The engine retry policy of Celery tasks matches nothing: Celery decides retries."""


def _terminates(app: Any, task_id: str) -> bool:
    """A cancel under a running body: ``revoke(terminate=True)`` or an operator's ``jobs
    cancel`` interrupts it; a plain ``revoke()`` lets a started task finish, as in Celery."""
    with app.ujobs_client.pool.connection() as conn:
        flag = revocations.revoked_terminate(conn, task_id)
    return flag is None or flag


@dataclass(frozen=True, slots=True)
class WorkerConf:
    """What a Celery worker reads from the app's configuration once, when it loads the app's
    tasks (Celery's ``WorkController`` reads them at start): the default time limits and the
    rate-limit settings. Celery's ``app.conf`` walks its layered mappings on every read, so a
    worker that read it per message paid for it per message."""

    limits: tuple[Any, Any]
    rates: rate_limit.RateConf


def worker_conf(app: Any) -> WorkerConf:
    return WorkerConf(conf_limits(app), rate_limit.rate_conf(app))


def run_message(app: Any, name: str, value: Any, conf: WorkerConf | None = None) -> dict[str, str]:
    """Execute one claimed Celery message; returns the row's small output ``{"state": ...}``.
    ``conf``: the app's settings as ``worker_conf`` read them (else read now)."""
    if conf is None:
        conf = worker_conf(app)
    ctx = current_job()
    if not is_celery_input(value):
        raise Discard(f"row input is not a Celery message (task {name!r})")
    app.set_current()  # shared_task proxies called from this body resolve to this app
    message = from_input(value, queue=ctx.queue, job_id=ctx.id)
    task_id = message.task_id
    task = task_registry(app)[name]
    request = request_for(message, ctx.redelivered)
    events = task_events.node(task)  # None: events off (the common case costs one check)
    expires = message.expires
    if expires is not None and expires <= ctx.clock.now():
        announce_revoked(task, task_id, request, expired=True, terminated=False)
        if events:
            task_events.revoked(events, task_id, expired=True, terminated=False)
        raise Cancel(f"task {task_id} expired at {expires.isoformat()}")
    if revoked_ids.REVOKED.is_revoked(app, task_id) or (  # claimed, then revoked
        stamp_revokes.revoking_header(message.headers) is not None  # a stamped-header revoke
    ):
        announce_revoked(task, task_id, request, expired=False, terminated=False)
        if events:
            task_events.revoked(events, task_id, expired=False, terminated=False)
        raise Cancel(f"task {task_id} revoked before it started")
    rate_limit.take_or_snooze(app, task, ctx, conf.rates)
    announce_received(app, task, message, request)
    if events:
        task_events.received(events, message)
        task_events.started(events, task_id)
    soft, hard = time_limits(task, message.headers, conf.limits)
    by_pool = limits_kept_by_pool()  # a prefork child: signalled and killed as by billiard
    watched = INTERRUPTER.watch(
        ctx.signal,
        None if by_pool else soft,
        None if by_pool else hard,
        should_terminate=lambda: _terminates(app, task_id),
    )
    traced: Any = None
    rejection: Reject | None = None
    forget_outage()
    with running_body(ctx.id, task_id) as held:
        try:
            with joins_will_block():
                try:
                    if by_pool:
                        with pool_time_limits(soft, hard, SOFT):
                            traced = _trace(app, task, task_id, message, request)
                    else:
                        traced = _trace(app, task, task_id, message, request)
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
            announce_revoked(task, task_id, request, expired=False, terminated=True)
            if events:
                task_events.revoked(events, task_id, expired=False, terminated=True)
            raise Cancel(f"task {task_id} terminated by revoke")
        limit_text = announce_time_limit(task, message, request, float(hard or 0))
        if events:
            task_events.failed(events, task_id, TimeLimitExceeded(hard), limit_text)
        raise task_failed(limit_text)
    if events and traced is not None:
        task_events.traced(events, task_id, traced)
    if traced is not None:
        result, info = traced[0], traced[1]
        state = states.SUCCESS if info is None else info.state
        if state == states.FAILURE:  # the tracer returns (ExceptionInfo, Info(FAILURE, exc))
            raise_if_outage(task_id)  # a result store that met an outage: not a FAILURE
            text = getattr(result, "traceback", None) or str(
                safe_repr(getattr(info, "retval", result))  # type: ignore[no-untyped-call]
            )  # a repr that raises must not turn the task's failure into another
            raise task_failed(text)
        if state != states.REJECTED:
            return {"state": state}
        retval = getattr(info, "retval", None)
        rejection = retval if isinstance(retval, Reject) else Reject(retval, requeue=False)
    assert rejection is not None
    if events:
        task_events.rejected(events, task_id, rejection, traced)
    if rejection.requeue:
        raise Snooze(0)
    announce_rejected(task, message, request, rejection)
    raise Discard(f"rejected: {rejection.reason!r}")


def _trace(app: Any, task: Any, task_id: str, message: Any, request: dict[str, Any]) -> Any:
    """Celery's tracer run on the message; the attempt's start is said just before the task's
    function (``work_start.py``)."""
    work_start.traced(task, app)
    return trace_task(
        task, task_id, message.args, message.kwargs, request, app=app, hostname=hostname()
    )


def killed_at_time_limit(app: Any, name: str, claimed: ClaimedJob, limit_s: float) -> Fail:
    """A prefork child killed at the task's hard time limit: what Celery's main process does
    (``Request.on_timeout``: FAILURE ``TimeLimitExceeded``, ``on_failure``, errbacks,
    ``task_failure``, the task-failed event), here in the worker; the row goes ``dead``."""
    app.set_current()
    message = from_input(claimed.input, queue=claimed.queue, job_id=claimed.id)
    task = task_registry(app)[name]
    request = request_for(message, claimed.deliveries > 1)
    limit_text = announce_time_limit(task, message, request, limit_s)
    events = task_events.node(task)
    if events:
        task_events.failed(events, message.task_id, TimeLimitExceeded(limit_s), limit_text)
    return task_failed(limit_text)


def _on_time_limit(app: Any, name: str) -> Any:
    def failed(claimed: ClaimedJob, limit_s: float) -> Fail:
        with outage_handed_back(name):  # a FAILURE store that met an outage: handed back
            return killed_at_time_limit(app, name, claimed, limit_s)

    return failed


def _runner(app: Any, name: str) -> Any:
    conf = worker_conf(app)  # once per worker, as Celery's WorkController reads it

    def run(value: Any) -> dict[str, str]:
        with outage_handed_back(name):  # a revoke/expiry/limit store that met an outage
            return run_message(app, name, value, conf)

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
                on_time_limit=_on_time_limit(app, name),
                work_starts_late=True,  # Celery's prologue first: work_start.py
            )
        )
    return out


__all__ = ["TaskRevokedError", "jobs_for_app", "run_message", "task_failed"]
