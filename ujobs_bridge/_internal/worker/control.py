"""What a worker does with a remote-control command: the engine's command panel.

Why it exists: ``inspect`` and ``control`` (Celery's remote control) ask running workers about
themselves (what runs, what they consume, their pool) and steer them (consume another queue,
grow the pool, shut down). A request reaches a worker through the mailbox (``presence.py``);
this module maps its command name to a handler and returns the handler's value in Celery's
reply shapes (``{"ok": ...}``, ``{"error": ...}``, lists of request infos). A handler that raises
(an unknown command raises ``KeyError``) answers ``{"error": repr(exc)}``, as Celery's mailbox
does. An app loaded with ``-A`` may add or replace handlers (``LoadedApp.control_commands``):
celery_compat answers ``registered``, ``active``, ``rate_limit``... with Celery's objects.

What it is not: the mailbox or the caller. Handlers run on the presence thread: they read the
worker's in-memory state, change its settings, and return quickly.
"""

from __future__ import annotations

import logging
import os
import platform
import resource
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from ujobs_bridge._internal.jobs import validation
from ujobs_bridge.errors import ConfigError

if TYPE_CHECKING:
    from ujobs_bridge._internal.worker.inflight import InFlight
    from ujobs_bridge._internal.worker.steering import Steerable

log = logging.getLogger("ujobs.control")

Handler = Callable[..., Any]  # handler(state, **arguments) -> the reply value
SW_IDENT = "ujobs-bridge"


class NoReply:
    """Returned by a handler whose command gets no reply (``shutdown``, as in Celery)."""


NO_REPLY = NoReply()


def ok(value: Any) -> dict[str, Any]:
    return {"ok": value}


def nok(value: Any) -> dict[str, Any]:
    return {"error": value}


def software_version() -> str:
    try:
        return version("ujobs-bridge")
    except PackageNotFoundError:
        return "0"


@dataclass
class ControlState:
    """What a handler sees: the worker, its node name and whatever the app adds (``extra``)."""

    worker: Steerable
    node: str
    started: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)


def is_started(entry: InFlight) -> bool:
    """Has the attempt's body started (Celery: active), rather than waiting for a free slot
    (Celery: reserved)?"""
    if entry.started:
        return True
    future = entry.future
    return future is not None and (future.running() or future.done())


def request_info(state: ControlState, entry: InFlight) -> dict[str, Any]:
    """A held attempt in the shape of Celery's ``Request.info()``; the job id is the task id."""
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


def held(state: ControlState, *, started: bool) -> list[InFlight]:
    """Attempts held and not settled: running (``started``) or waiting for a slot. With
    ``started``, hung bodies too (settled at their timeout, still running: see ``hung_info``)."""
    hung = {h.job_id for h in state.worker.hung()} if started else set()
    return [
        e
        for e in state.worker.table.entries()
        if (not e.settled and is_started(e) is started) or e.claimed.id in hung
    ]


def hung_info(state: ControlState, entry: InFlight) -> dict[str, Any]:
    """What ``inspect active`` adds to a hung body's entry (a body still running past its
    timeout; its attempt already failed and its slot stays lost until it returns): ``hung``
    and ``overdue_s`` (seconds past its deadline). Other entries are Celery's shape as is."""
    for h in state.worker.hung():
        if h.job_id == entry.claimed.id:
            return {"hung": True, "overdue_s": round(h.overdue_s, 3), "timeout_s": h.timeout_s}
    return {}


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


# ---------------------------------------------------------------------------- inspect commands


def ping(state: ControlState, **_: Any) -> Any:
    return ok("pong")


def active(state: ControlState, safe: Any = None, **_: Any) -> Any:
    return [request_info(state, e) | hung_info(state, e) for e in held(state, started=True)]


def reserved(state: ControlState, **_: Any) -> Any:
    return [request_info(state, e) for e in held(state, started=False)]


def scheduled(state: ControlState, **_: Any) -> Any:
    return []  # ETA jobs wait in the database (run_at), not in a worker's memory


def active_queues(state: ControlState, **_: Any) -> Any:
    return [queue_info(q) for q in state.worker.queues]


def registered(state: ControlState, taskinfoitems: Any = None, **_: Any) -> Any:
    return sorted(state.worker.names)


def revoked(state: ControlState, **_: Any) -> Any:
    return []


def conf(state: ControlState, with_defaults: Any = False, **_: Any) -> Any:
    return {}


def report(state: ControlState, **_: Any) -> Any:
    return ok(
        f"software -> {SW_IDENT}:{software_version()} ({platform.system()} "
        f"{platform.python_implementation()} {platform.python_version()})\n"
        f"node -> {state.node} pid={os.getpid()} pool={state.worker.config.pool}"
    )


def query_task(state: ControlState, ids: Any = (), **_: Any) -> Any:
    wanted = {str(i) for i in (ids if isinstance(ids, list | tuple) else [ids])}
    out: dict[str, Any] = {}
    for entry in state.worker.table.entries():
        if str(entry.claimed.id) in wanted and not entry.settled:
            kind = "active" if is_started(entry) else "reserved"
            out[str(entry.claimed.id)] = [kind, request_info(state, entry)]
    return out


def pool_info(state: ControlState) -> dict[str, Any]:
    """Celery's ``stats()['pool']``, at the pool's current size (``max-concurrency``; the
    process pool's children as ``processes``)."""
    worker = state.worker
    config = worker.config
    return {
        "implementation": f"ujobs_bridge:{config.pool}",
        "max-concurrency": config.concurrency,
        "processes": worker.runtimes.pids(),
        "max-tasks-per-child": config.max_tasks_per_child or "N/A",
        "max-memory-per-child": config.max_memory_per_child_kib or "N/A",
        "put-guarded-by-semaphore": False,
        "timeouts": [config.soft_time_limit_s or 0, config.time_limit_s or 0],
    }


def stats(state: ControlState, **_: Any) -> Any:
    worker = state.worker
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "total": dict(worker.processed),
        "pid": os.getpid(),
        "clock": "0",
        "uptime": int(time.time() - state.started),
        "pool": pool_info(state),
        "hung": len(worker.hung()),  # bodies past their timeout (listed by `inspect active`)
        "broker": {"transport": "postgres", "hostname": worker.dsn_host},
        "prefetch_count": worker.config.capacity,
        "rusage": {
            "utime": usage.ru_utime,
            "stime": usage.ru_stime,
            "maxrss": usage.ru_maxrss,
            "minflt": usage.ru_minflt,
            "majflt": usage.ru_majflt,
            "nvcsw": usage.ru_nvcsw,
            "nivcsw": usage.ru_nivcsw,
        },
        "sw_ident": SW_IDENT,
        "sw_ver": software_version(),
        "sw_sys": platform.system(),
    }
    if worker.autoscaler is not None:
        out["autoscaler"] = worker.autoscaler.info()
    return out


def clock(state: ControlState, **_: Any) -> Any:
    return {"clock": 0}


# ---------------------------------------------------------------------------- control commands


def add_consumer(state: ControlState, queue: str, **_: Any) -> Any:
    try:
        validation.queue_name(queue)
    except ConfigError as exc:
        return nok(exc.render())
    worker = state.worker
    if queue not in worker.queues:
        worker.reload(worker.registry, (*worker.queues, queue))
        log.info("ujobs.control: consuming from %s", queue)
    return ok(f"add consumer {queue}")


def cancel_consumer(state: ControlState, queue: str, **_: Any) -> Any:
    worker = state.worker
    kept = tuple(q for q in worker.queues if q != queue)
    if not kept:
        return nok(f"{queue} is the only queue this worker consumes: it would consume none")
    if kept != worker.queues:
        worker.reload(worker.registry, kept)
        log.info("ujobs.control: no longer consuming from %s", queue)
    return ok(f"no longer consuming from {queue}")


def pool_grow(state: ControlState, n: Any = 1, **_: Any) -> Any:
    if state.worker.autoscaler is not None:  # Celery's answer under --autoscale
        return nok("pool_grow is not supported with autoscale. Adjust autoscale range instead.")
    reason = state.worker.resize(state.worker.config.concurrency + int(n))
    if reason:
        return nok(reason)
    log.info("ujobs.control: pool grown to %d", state.worker.config.concurrency)
    return ok("pool will grow")


def pool_shrink(state: ControlState, n: Any = 1, **_: Any) -> Any:
    if state.worker.autoscaler is not None:
        return nok("pool_shrink is not supported with autoscale. Adjust autoscale range instead.")
    reason = state.worker.resize(state.worker.config.concurrency - int(n))
    if reason:
        return nok(reason)
    log.info("ujobs.control: pool shrunk to %d", state.worker.config.concurrency)
    return ok("pool will shrink")


def autoscale(state: ControlState, max: Any = None, min: Any = None, **_: Any) -> Any:
    scaler = state.worker.autoscaler
    if scaler is None:
        raise ValueError("Autoscale not enabled")  # Celery's answer without --autoscale
    try:
        most, least = scaler.update(max, min)
    except ConfigError as exc:
        return nok(exc.render())
    return ok(f"autoscale now max={most} min={least}")


def shutdown(state: ControlState, msg: str = "Got shutdown from remote", **_: Any) -> Any:
    log.warning(msg)
    state.worker.request_remote_shutdown()
    return NO_REPLY


def enable_events(state: ControlState, **_: Any) -> Any:
    if state.worker.set_task_events(True):
        return ok("task events already enabled")
    log.info("Events of group {task} enabled by remote.")
    return ok("task events enabled")


def disable_events(state: ControlState, **_: Any) -> Any:
    if not state.worker.set_task_events(False):
        return ok("task events already disabled")
    log.info("Events of group {task} disabled by remote.")
    return ok("task events disabled")


def heartbeat(state: ControlState, **_: Any) -> Any:
    return None


def rate_limit(state: ControlState, task_name: str = "", rate_limit: Any = None, **_: Any) -> Any:
    if task_name not in state.worker.registry:
        return nok("unknown task")
    return nok("rate limits apply to Celery tasks; an @job function has none")


def time_limit(state: ControlState, task_name: str = "", **_: Any) -> Any:
    if task_name not in state.worker.registry:
        return nok("unknown task")
    return nok("an @job function's time limit is its timeout= (set where it is declared)")


COMMANDS: Mapping[str, Handler] = {
    "ping": ping,
    "active": active,
    "reserved": reserved,
    "scheduled": scheduled,
    "active_queues": active_queues,
    "registered": registered,
    "revoked": revoked,
    "conf": conf,
    "report": report,
    "query_task": query_task,
    "stats": stats,
    "clock": clock,
    "add_consumer": add_consumer,
    "cancel_consumer": cancel_consumer,
    "pool_grow": pool_grow,
    "pool_shrink": pool_shrink,
    "autoscale": autoscale,
    "shutdown": shutdown,
    "enable_events": enable_events,
    "disable_events": disable_events,
    "heartbeat": heartbeat,
    "rate_limit": rate_limit,
    "time_limit": time_limit,
}


class Panel:
    """The commands one worker answers: the engine's, with the app's on top. Several mailboxes
    may dispatch to it (Postgres, and an app's broker during a cutover): one command runs at a
    time."""

    def __init__(self, state: ControlState, extra: Mapping[str, Handler] | None = None) -> None:
        self.state = state
        self.handlers: dict[str, Handler] = {**COMMANDS, **(extra or {})}
        self._one_at_a_time = threading.Lock()

    def dispatch(self, command: str, arguments: Mapping[str, Any]) -> Any:
        """The reply value of ``command`` (``NO_REPLY`` for none); never raises."""
        try:
            handler = self.handlers[command]
            with self._one_at_a_time:
                return handler(self.state, **dict(arguments))
        except Exception as exc:  # Celery's mailbox answers every failure with its repr
            log.error("pidbox command error: %r", exc, exc_info=not isinstance(exc, KeyError))
            return nok(repr(exc))
