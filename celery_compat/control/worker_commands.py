"""The remote-control commands a bridge worker answers with its Celery app: Celery's replies.

Why it exists: the engine's panel (``ujobs_bridge._internal.worker.control``) knows jobs, not Celery tasks.
For a Celery app, ``inspect registered`` lists task names with their attributes as Celery's
worker does, ``active``/``reserved``/``query_task`` describe messages by their Celery task id in
the shape of ``Request.info()``, ``scheduled`` lists the messages waiting in Postgres for a future
time (an eta/countdown: rows whose ``run_at`` is ahead) on the worker's queues, each reported by
one live worker of the fleet (``db/scheduled.py`` says which) and at most ``SCHEDULED_LIMIT`` per
worker (the earliest), ``conf`` and ``report`` are the app's own, ``revoked`` lists the
ids the worker knows revoked, and ``rate_limit``/``time_limit`` change the task objects this
worker process runs (the next run reads them: ``rate_limit.py``, ``execution.py``), with
Celery's replies and log lines. Replies are encoded with kombu's JSON, as Celery's mailbox does.

What it is not: the caller's side (``control.py``) or the durable revoke (also ``control.py``:
the worker's ``revoke`` only acknowledges it, as Celery's reply does).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from celery.utils.functional import maybe_list
from celery.utils.serialization import jsonify
from celery.utils.time import rate
from kombu.utils import json as kombu_json
from kombu.utils.encoding import safe_repr

from celery_compat.db import scheduled as scheduled_db
from celery_compat.sending.message_row import from_input, is_celery_input
from celery_compat.worker import revoked_ids, stamp_revokes
from ujobs_bridge.ext import control as engine
from ujobs_bridge.ext.control import ControlState, Handler, nok, ok
from ujobs_bridge.ext.worker import InFlight

log = logging.getLogger("celery.worker.control")
DEFAULT_TASK_INFO_ITEMS = ("exchange", "routing_key", "rate_limit")
SCHEDULED_LIMIT = 1000  # rows one worker lists for `inspect scheduled` (the earliest first)
_dumps: Callable[[Any], str] = kombu_json.dumps  # typed here because kombu is not


def encode(value: Any) -> str:
    """A reply as kombu's JSON text (what Celery's mailbox sends)."""
    return _dumps(value)


def request_info(state: ControlState, entry: InFlight, safe: Any = False) -> dict[str, Any]:
    """A held message as Celery's ``Request.info()``: keyed by its Celery task id."""
    claimed = entry.claimed
    if not is_celery_input(claimed.input):
        return engine.request_info(state, entry)
    message = from_input(claimed.input, queue=claimed.queue, job_id=claimed.id)
    headers = message.headers
    return {
        "id": message.task_id,
        "name": message.task,
        "args": headers.get("argsrepr") if safe else message.args,
        "kwargs": headers.get("kwargsrepr") if safe else message.kwargs,
        "type": message.task,
        "hostname": state.node,
        "time_start": entry.started_at,
        "acknowledged": True,
        "delivery_info": {
            "exchange": "",
            "routing_key": claimed.queue,
            "priority": message.properties.get("priority"),
            "redelivered": claimed.deliveries > 1,
        },
        "worker_pid": os.getpid(),
    }


def scheduled_info(state: ControlState, row: scheduled_db.ScheduledRow) -> dict[str, Any]:
    """A message waiting for its time, as a Celery worker's ``inspect scheduled`` entry: its
    eta, its priority (the message's; Celery's timer reports its own entry priority) and the
    request as ``Request.info()`` shows one not yet started (no start time, not acknowledged,
    no worker pid)."""
    if is_celery_input(row.input):
        message = from_input(row.input, queue=row.queue, job_id=row.id)
        request = {
            "id": message.task_id,
            "name": message.task,
            "args": message.args,
            "kwargs": message.kwargs,
            "type": message.task,
            "priority": message.properties.get("priority"),
        }
    else:  # an @job row on a queue the worker shares with the app
        payload = row.input if isinstance(row.input, dict) else {}
        request = {
            "id": str(row.id),
            "name": row.name,
            "args": payload.get("args", []),
            "kwargs": payload.get("kwargs", {}),
            "type": row.name,
            "priority": None,
        }
    priority = request.pop("priority")
    request |= {
        "hostname": state.node,
        "time_start": None,
        "acknowledged": False,
        "delivery_info": {
            "exchange": "",
            "routing_key": row.queue,
            "priority": priority,
            "redelivered": row.deliveries > 0,
        },
        "worker_pid": None,
    }
    return {"eta": row.run_at.isoformat(), "priority": row.priority, "request": request}


def _task_id(entry: InFlight) -> str:
    headers = entry.claimed.input.get("headers") if is_celery_input(entry.claimed.input) else None
    return str((headers or {}).get("id") or entry.claimed.id)


SETTABLE = ("rate_limit", "time_limit", "soft_time_limit")


def _set(state: ControlState, app: Any, task_name: str, **attrs: Any) -> None:
    """Change the task here (thread bodies read it at their next run) and in the worker's task
    settings, which a ``--pool processes`` child applies before its next body."""
    task = app.tasks[task_name]
    for attr, value in attrs.items():
        setattr(task, attr, value)
    state.worker.task_settings.setdefault(task_name, {}).update(attrs)


def apply_settings(app: Any, settings: Mapping[str, Mapping[str, Any]]) -> None:
    """In a pool child: the parent's task settings onto this process's tasks."""
    for task_name, attrs in settings.items():
        task = app.tasks.get(task_name)
        if task is None:
            continue
        for attr, value in attrs.items():
            if attr in SETTABLE:
                setattr(task, attr, value)


def commands(app: Any) -> dict[str, Handler]:
    """The handlers that answer with ``app`` (closures over it)."""

    def active(state: ControlState, safe: Any = False, **_: Any) -> Any:
        return [
            request_info(state, e, safe) | engine.hung_info(state, e)
            for e in engine.held(state, started=True)
        ]

    def reserved(state: ControlState, **_: Any) -> Any:
        return [request_info(state, e) for e in engine.held(state, started=False)]

    def scheduled(state: ControlState, **_: Any) -> Any:
        worker = state.worker
        with app.ujobs_client.pool.connection() as conn:
            rows = scheduled_db.scheduled(
                conn, worker_id=worker.id, queues=worker.queues, limit=SCHEDULED_LIMIT
            )
        return [scheduled_info(state, row) for row in rows]

    def query_task(state: ControlState, ids: Any = (), **_: Any) -> Any:
        wanted = {str(i) for i in maybe_list(ids) or []}
        out: dict[str, Any] = {}
        for entry in state.worker.table.entries():
            task_id = _task_id(entry)
            if task_id in wanted and not entry.settled:
                kind = "active" if engine.is_started(entry) else "reserved"
                out[task_id] = [kind, request_info(state, entry)]
        return out

    def registered(
        state: ControlState, taskinfoitems: Any = None, builtins: Any = False, **_: Any
    ) -> Any:
        reg = app.tasks
        items = [
            i
            for i in (taskinfoitems or DEFAULT_TASK_INFO_ITEMS)
            if isinstance(i, str) and not i.startswith("_")
        ]
        names = sorted(n for n in reg if builtins or not n.startswith("celery."))
        out = []
        for name in names:
            task = reg[name]
            fields = {f: str(getattr(task, f)) for f in items if getattr(task, f, None) is not None}
            info = " ".join("=".join(pair) for pair in fields.items())
            out.append(f"{name} [{info}]" if fields else name)
        return out

    def revoked(state: ControlState, **_: Any) -> Any:
        return list(revoked_ids.REVOKED.ids())

    def conf(state: ControlState, with_defaults: Any = False, **_: Any) -> Any:
        return jsonify(
            app.conf.table(with_defaults=with_defaults),
            keyfilter=lambda key: isinstance(key, str) and not key.startswith("__"),
            unknown_type_filter=safe_repr,
        )

    def report(state: ControlState, **_: Any) -> Any:
        return ok(app.bugreport())

    def revoke(state: ControlState, task_id: Any = None, **_: Any) -> Any:
        # The revoke itself is durable and already applied (control.py); this is Celery's reply.
        return ok(f"tasks {set(maybe_list(task_id) or [])} flagged as revoked")

    def revoke_by_stamped_headers(
        state: ControlState,
        headers: Any = None,
        terminate: Any = False,
        signal: Any = None,
        **_: Any,
    ) -> Any:
        wanted = stamp_revokes.add(headers)
        if not terminate:
            return ok(f"headers {wanted} flagged as revoked, but not terminated")
        hit: dict[str, set[Any]] = {}
        for entry in engine.held(state, started=True):
            claimed = entry.claimed
            if not is_celery_input(claimed.input):
                continue
            message = from_input(claimed.input, queue=claimed.queue, job_id=claimed.id)
            header = stamp_revokes.revoking_header(message.headers)
            if header is not None:
                app.control.revoke(message.task_id, terminate=True, signal=signal or "SIGTERM")
                for key, value in header.items():
                    hit.setdefault(key, set()).add(value)
        if not hit:
            return ok(f"headers {wanted} were not terminated")
        return ok(f"headers {hit} revoked")

    def rate_limit(
        state: ControlState, task_name: str = "", rate_limit: Any = None, **_: Any
    ) -> Any:
        try:
            rate(rate_limit)
        except ValueError as exc:
            return nok(f"Invalid rate limit string: {exc!r}")
        if task_name not in app.tasks:
            log.error("Rate limit attempt for unknown task %s", task_name)
            return nok("unknown task")
        _set(state, app, task_name, rate_limit=rate_limit)
        if not rate_limit:
            log.info("Rate limits disabled for tasks of type %s", task_name)
            return ok("rate limit disabled successfully")
        log.info("New rate limit for tasks of type %s: %s.", task_name, rate_limit)
        return ok("new rate limit set successfully")

    def time_limit(
        state: ControlState, task_name: str = "", hard: Any = None, soft: Any = None, **_: Any
    ) -> Any:
        if task_name not in app.tasks:
            log.error("Change time limit attempt for unknown task %s", task_name)
            return nok("unknown task")
        _set(state, app, task_name, soft_time_limit=soft, time_limit=hard)
        log.info("New time limits for tasks of type %s: soft=%s hard=%s", task_name, soft, hard)
        return ok("time limits set successfully")

    def stats(state: ControlState, **_: Any) -> Any:
        out = engine.stats(state)
        out["clock"] = str(app.clock.value)
        hard, soft = app.conf.task_time_limit, app.conf.task_soft_time_limit
        out["pool"]["timeouts"] = [soft or 0, hard or 0]
        return out

    return {
        "active": active,
        "reserved": reserved,
        "scheduled": scheduled,
        "query_task": query_task,
        "registered": registered,
        "revoked": revoked,
        "conf": conf,
        "report": report,
        "revoke": revoke,
        "revoke_by_stamped_headers": revoke_by_stamped_headers,
        "rate_limit": rate_limit,
        "time_limit": time_limit,
        "stats": stats,
    }
