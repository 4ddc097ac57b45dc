"""The remote-control commands a bridge worker answers with its Celery app: Celery's commands,
Celery's replies, mapped onto the engine's commands.

Why it exists: the engine's panel (``ujobs_bridge.ext.control``) has its own commands (``ping``,
``stats``, ``attempts``, ``consume``, ``pool_grow``, ``autoscale``, ``task_events``,
``shutdown``...) with its own reply shapes and errors, and knows jobs, not Celery tasks. A
Celery app's worker answers Celery's remote control (``celery inspect|control|status``,
``app.control``, Flower) through the command set ``celery`` (``command_set``), which the
Postgres mailbox (``app_control.py`` sends ``celery.<command>``) and the broker's pidbox
(``broker.py``) both dispatch to. Each Celery command calls the engine's command and words its
answer as Celery's worker does: ``{"ok": ...}``/``{"error": ...}``, ``stats()`` with Celery's
``pool`` and ``autoscaler``, queues as kombu's ``Queue.as_dict``, held messages as
``Request.info()`` keyed by their Celery task id, Celery's refusals (``pool_grow`` under
autoscale, "Autoscale not enabled") and log lines; a command Celery's worker has and the engine
does not (``registered`` with task attributes, ``scheduled``: the messages waiting in Postgres
for a future time on the worker's queues, each reported by one live worker of the fleet,
``db/scheduled.py``, at most ``SCHEDULED_LIMIT`` per worker, the earliest; ``conf``, ``report``,
``revoked``, ``rate_limit``/``time_limit``, which change the task objects this worker process
runs: ``rate_limit.py``, ``execution.py``) is answered here with the app. A handler that raises,
or a command the set lacks, answers ``{"error": repr(exc)}``, as Celery's mailbox does. Replies
are encoded with kombu's JSON, as Celery's mailbox does.

``revoke``/``terminate`` make the revoke durable (``revoking.py``) unless it is recorded
already (the sender was a bridge app's ``app.control``, or another worker heard it first), so a
revoke from Celery's CLI or Flower over the broker is as real as one from ``app.control``.
``hello`` (a Celery worker's Mingle step as it starts beside this one) is answered as Celery's
worker answers it; a command the set lacks is answered with Celery's error reply but logged at
DEBUG, since Celery workers and Flower on a shared pidbox send commands of their own.

What it is not: the caller's side (``app_control.py``) or the durable revoke itself
(``revoking.py``).
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from celery.utils import debug as celery_debug
from celery.utils.functional import maybe_list
from celery.utils.serialization import jsonify
from celery.utils.time import rate
from kombu.utils import json as kombu_json
from kombu.utils.encoding import safe_repr

from celery_compat.control import revoking
from celery_compat.control.names import COMMAND_SET
from celery_compat.db import scheduled as scheduled_db
from celery_compat.sending.message_row import from_input, is_celery_input
from celery_compat.worker import revoked_ids, stamp_revokes
from ujobs_bridge.errors import UjobsError
from ujobs_bridge.ext import control as engine
from ujobs_bridge.ext.control import CommandSet, ControlState, Handler
from ujobs_bridge.ext.observe import redact, redact_repr
from ujobs_bridge.ext.worker import InFlight

log = logging.getLogger("celery.worker.control")
DEFAULT_TASK_INFO_ITEMS = ("exchange", "routing_key", "rate_limit")
SCHEDULED_LIMIT = 1000  # rows one worker lists for `inspect scheduled` (the earliest first)
_dumps: Callable[[Any], str] = kombu_json.dumps  # typed here because kombu is not


def encode(value: Any) -> str:
    """A reply as kombu's JSON text (what Celery's mailbox sends)."""
    return _dumps(value)


def ok(value: Any) -> dict[str, Any]:
    """Celery's success reply."""
    return {"ok": value}


def nok(value: Any) -> dict[str, Any]:
    """Celery's error reply."""
    return {"error": value}


def failed(name: str, exc: Exception) -> dict[str, Any]:
    """A command that raised, as Celery's mailbox answers it: the exception's repr, logged. A
    command this worker does not have (``KeyError(name)``: a newer Celery's, a tool's own) is
    answered the same way but logged at DEBUG: Celery workers and Flower beside the bridge
    send commands on the shared pidbox, and that is no error of this worker."""
    if isinstance(exc, KeyError):
        log.debug("pidbox command not known here: %s", name)
    else:
        log.error("pidbox command error: %r", exc, exc_info=True)
    return nok(repr(exc))


def job_request_info(state: ControlState, entry: InFlight) -> dict[str, Any]:
    """A held ``@job`` attempt (a queue the worker shares with the app) as ``Request.info()``:
    its job id is the task id, its input's ``args``/``kwargs`` the arguments."""
    claimed = entry.claimed
    payload = claimed.input if isinstance(claimed.input, dict) else {}
    return {
        "id": str(claimed.id),
        "name": claimed.name,
        "args": payload.get("args", []),
        "kwargs": payload.get("kwargs", {}),
        "type": claimed.name,
        "hostname": state.node,
        "time_start": entry.started_at,
        "acknowledged": True,
        "delivery_info": {
            "exchange": "",
            "routing_key": claimed.queue,
            "priority": None,
            "redelivered": claimed.deliveries > 1,
        },
        "worker_pid": os.getpid(),
    }


def _shown(text: Any) -> Any:
    return redact_repr(text) if isinstance(text, str) else text


def request_info(state: ControlState, entry: InFlight, safe: Any = False) -> dict[str, Any]:
    """A held message as Celery's ``Request.info()``: keyed by its Celery task id."""
    claimed = entry.claimed
    if not is_celery_input(claimed.input):
        return job_request_info(state, entry)
    message = from_input(claimed.input, queue=claimed.queue, job_id=claimed.id)
    headers = message.headers
    return {
        "id": message.task_id,
        "name": message.task,
        # shown to operators (``inspect active``): secrets hidden, as on every surface
        "args": _shown(headers.get("argsrepr")) if safe else redact(message.args),
        "kwargs": _shown(headers.get("kwargsrepr")) if safe else redact(message.kwargs),
        "type": message.task,
        "hostname": state.node,
        "time_start": entry.started_at,
        "acknowledged": True,
        "delivery_info": {
            "exchange": "",
            "routing_key": claimed.queue,
            "priority": message.priority,
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
            "priority": message.priority,
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


def queue_info(name: str) -> dict[str, Any]:
    """A consumed queue in the shape of kombu's ``Queue.as_dict(recurse=True)``."""
    return {
        "name": name,
        "exchange": {"name": name, "type": "direct", "arguments": None, "durable": True},
        "routing_key": name,
        "queue_arguments": None,
        "binding_arguments": None,
        "consumer_arguments": None,
        "durable": True,
        "exclusive": False,
        "auto_delete": False,
        "no_ack": False,
        "alias": None,
        "bindings": [],
        "no_declare": None,
        "expires": None,
        "message_ttl": None,
        "max_length": None,
        "max_length_bytes": None,
        "max_priority": None,
    }


def celery_stats(state: ControlState, app: Any) -> dict[str, Any]:
    """The engine's ``stats`` as Celery's worker ``stats()``: ``pool`` as Celery's pool info
    (``max-concurrency`` the current size, the children's pids as ``processes``, the app's time
    limits as ``timeouts``), ``autoscaler`` as Celery's ``Autoscaler.info()``."""
    engine_stats = engine.stats(state)
    pool = engine_stats["pool"]
    software = engine_stats["software"]
    hard, soft = app.conf.task_time_limit, app.conf.task_soft_time_limit
    out: dict[str, Any] = {
        "total": engine_stats["processed"],
        "pid": engine_stats["pid"],
        "clock": str(app.clock.value),
        "uptime": int(engine_stats["uptime_s"]),
        "pool": {
            "implementation": f"ujobs_bridge:{pool['kind']}",
            "max-concurrency": pool["size"],
            "processes": pool["pids"],
            "max-tasks-per-child": pool["max_jobs_per_child"] or "N/A",
            "max-memory-per-child": pool["max_memory_per_child_kib"] or "N/A",
            "put-guarded-by-semaphore": False,
            "timeouts": [soft or 0, hard or 0],
        },
        "hung": engine_stats["hung"],  # bodies past their timeout (listed by `inspect active`)
        "broker": {"transport": "postgres", "hostname": engine_stats["database"]},
        "prefetch_count": engine_stats["prefetch"],
        "rusage": engine_stats["rusage"],
        "sw_ident": software["name"],
        "sw_ver": software["version"],
        "sw_sys": software["system"],
    }
    scaled = engine_stats["autoscale"]
    if scaled is not None:
        out["autoscaler"] = {
            "max": scaled["max"],
            "min": scaled["min"],
            "current": scaled["size"],
            "qty": scaled["held"],
        }
    return out


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


def command_set(app: Any) -> CommandSet:
    """Celery's commands for a worker of ``app``: the engine's set ``celery``."""
    return CommandSet(COMMAND_SET, commands(app), failed)


def commands(app: Any) -> dict[str, Handler]:
    """Celery's commands by Celery's names, answered with ``app`` (closures over it) and the
    engine's commands."""

    def ping(state: ControlState, **_: Any) -> Any:
        engine.ping(state)
        return ok("pong")

    def active_queues(state: ControlState, **_: Any) -> Any:
        return [queue_info(q) for q in engine.queues(state)["queues"]]

    def clock(state: ControlState, **_: Any) -> Any:
        return {"clock": 0}

    def heartbeat(state: ControlState, **_: Any) -> Any:
        return None

    def add_consumer(state: ControlState, queue: str = "", **_: Any) -> Any:
        try:
            engine.consume(state, queue=queue)
        except UjobsError as exc:
            return nok(exc.render())
        return ok(f"add consumer {queue}")

    def cancel_consumer(state: ControlState, queue: str = "", **_: Any) -> Any:
        try:
            engine.stop_consuming(state, queue=queue)
        except UjobsError as exc:
            return nok(exc.message)
        return ok(f"no longer consuming from {queue}")

    def pool_grow(state: ControlState, n: Any = 1, **_: Any) -> Any:
        if state.worker.autoscaler is not None:  # Celery's answer under --autoscale
            return nok("pool_grow is not supported with autoscale. Adjust autoscale range instead.")
        try:
            engine.pool_grow(state, n=n)
        except UjobsError as exc:
            return nok(exc.message)
        return ok("pool will grow")

    def pool_shrink(state: ControlState, n: Any = 1, **_: Any) -> Any:
        if state.worker.autoscaler is not None:
            return nok(
                "pool_shrink is not supported with autoscale. Adjust autoscale range instead."
            )
        try:
            engine.pool_shrink(state, n=n)
        except UjobsError as exc:
            return nok(exc.message)
        return ok("pool will shrink")

    def autoscale(state: ControlState, max: Any = None, min: Any = None, **_: Any) -> Any:
        if state.worker.autoscaler is None:
            raise ValueError("Autoscale not enabled")  # Celery's answer without --autoscale
        try:
            bounds = engine.autoscale(state, max=max, min=min)
        except UjobsError as exc:
            return nok(exc.render())
        return ok(f"autoscale now max={bounds['max']} min={bounds['min']}")

    def shutdown(state: ControlState, msg: str = "Got shutdown from remote", **_: Any) -> Any:
        log.warning(msg)
        return engine.shutdown(state)

    def enable_events(state: ControlState, **_: Any) -> Any:
        if not engine.task_events(state, on=True)["changed"]:
            return ok("task events already enabled")
        log.info("Events of group {task} enabled by remote.")
        return ok("task events enabled")

    def disable_events(state: ControlState, **_: Any) -> Any:
        if not engine.task_events(state, on=False)["changed"]:
            return ok("task events already disabled")
        log.info("Events of group {task} disabled by remote.")
        return ok("task events disabled")

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
        # the revokes, and the tasks cancelled from the engine's side (jobs cancel, dashboard)
        return revoked_ids.listed(app)

    def conf(state: ControlState, with_defaults: Any = False, **_: Any) -> Any:
        return jsonify(
            app.conf.table(with_defaults=with_defaults),
            keyfilter=lambda key: isinstance(key, str) and not key.startswith("__"),
            unknown_type_filter=safe_repr,
        )

    def report(state: ControlState, **_: Any) -> Any:
        return ok(app.bugreport())

    def revoke(
        state: ControlState,
        task_id: Any = None,
        terminate: Any = False,
        signal: Any = None,
        **_: Any,
    ) -> Any:
        # Made durable here when no one has yet (Celery's CLI or Flower over the broker, a plain
        # Celery app): one read per id when the sender (app.control) or another worker did.
        ids = {str(t) for t in maybe_list(task_id) or []}
        held = {_task_id(e) for e in state.worker.table.entries() if not e.settled}
        revoking.revoke_tasks(
            app, sorted(ids), terminate=terminate, signal=signal, skip_recorded=True
        )
        if terminate:  # Celery: the ids this worker held and terminates
            hit = sorted(ids & held)
            for tid in hit:
                log.info("Terminating %s (%s)", tid, revoking.signal_name(signal))
            return ok(f"terminate: {', '.join(hit)}" if hit else "terminate: tasks unknown")
        log.info("Tasks flagged as revoked: %s", ", ".join(sorted(ids)))
        return ok(f"tasks {ids} flagged as revoked")

    def terminate(state: ControlState, signal: Any = None, task_id: Any = None, **_: Any) -> Any:
        return revoke(state, task_id, terminate=True, signal=signal)

    def hello(state: ControlState, from_node: Any = None, revoked: Any = None, **_: Any) -> Any:
        # A Celery worker starting beside this one (its Mingle step) asks for the revoked ids;
        # answered as Celery 5.7's worker does. The ids it sends are its in-memory ones, which
        # its own revoke already handled: not recorded here.
        if from_node == state.node:
            return None
        log.info("sync with %s", from_node)
        return {"revoked": revoked_ids.listed(app), "clock": app.clock.forward()}

    def pool_restart(state: ControlState, **_: Any) -> Any:
        # Flower's "restart pool" button: Celery's refusal when restarts are off; the bridge
        # worker has no in-place reload, so it is always refused, with the way to do it
        return nok(
            "ValueError('Pool restarts not enabled'): restart the bridge worker to load new code"
        )

    def election(state: ControlState, **_: Any) -> Any:
        return None  # Celery's worker without gossip: no reply value

    def memsample(state: ControlState, **_: Any) -> Any:
        return celery_debug.sample_mem()

    def memdump(state: ControlState, samples: Any = 10, **_: Any) -> Any:
        out = io.StringIO()
        celery_debug.memdump(file=out)
        return out.getvalue()

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
        return celery_stats(state, app)

    return {
        "ping": ping,
        "active_queues": active_queues,
        "clock": clock,
        "heartbeat": heartbeat,
        "add_consumer": add_consumer,
        "cancel_consumer": cancel_consumer,
        "pool_grow": pool_grow,
        "pool_shrink": pool_shrink,
        "autoscale": autoscale,
        "shutdown": shutdown,
        "enable_events": enable_events,
        "disable_events": disable_events,
        "active": active,
        "reserved": reserved,
        "scheduled": scheduled,
        "query_task": query_task,
        "registered": registered,
        "revoked": revoked,
        "conf": conf,
        "report": report,
        "revoke": revoke,
        "terminate": terminate,
        "hello": hello,
        "election": election,
        "pool_restart": pool_restart,
        "memsample": memsample,
        "memdump": memdump,
        # Celery's older names, still in its panel
        "dump_active": active,
        "dump_reserved": reserved,
        "dump_schedule": scheduled,
        "dump_revoked": revoked,
        "dump_tasks": registered,
        "dump_conf": conf,
        "revoke_by_stamped_headers": revoke_by_stamped_headers,
        "rate_limit": rate_limit,
        "time_limit": time_limit,
        "stats": stats,
    }
