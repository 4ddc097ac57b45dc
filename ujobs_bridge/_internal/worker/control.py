"""What a worker does with a remote-control command: the engine's command panel.

Why it exists: operators and tools ask running workers about themselves (what they hold, what
they consume, their pool) and steer them (consume another queue, resize the pool, shut down).
A request reaches a worker through the mailbox (``presence.py``); this module maps its command
name to a handler and returns the handler's reply. The engine's commands (``COMMANDS``) are
``ping``, ``stats``, ``attempts``, ``queues``, ``jobs``, ``consume``, ``stop_consuming``,
``pool_grow``, ``pool_shrink``, ``autoscale``, ``task_events`` and ``shutdown``. A reply is a
JSON object of the engine's words; a refusal or a failure is ``{"error": {"code", "message",
"hint"}}`` (``error_reply``: a handler raises a ``UjobsError``, and anything else it raises is
``UJ_CONTROL_FAILED``); ``shutdown`` gets no reply.

An upper package adds its own commands as a ``CommandSet`` under its own prefix
(``<set>.<command>``), with its own reply shapes and errors: celery_compat maps Celery's remote
control (``inspect``, ``control``, Flower) onto the handlers here as the set ``celery``. A
command of a set this node does not have gets no reply: nodes of another kind share the
mailbox, and the caller waits only for the nodes that have the set (``remote.broadcast``).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from ujobs_bridge._internal.jobs import validation
from ujobs_bridge.errors import ControlError, ErrorCode, UjobsError

if TYPE_CHECKING:
    from ujobs_bridge._internal.worker.inflight import InFlight
    from ujobs_bridge._internal.worker.steering import Steerable

log = logging.getLogger("ujobs.control")

Handler = Callable[..., Any]  # handler(state, **arguments) -> the reply value
SW_IDENT = "ujobs-bridge"


class NoReply:
    """Returned by a handler whose command gets no reply (``shutdown``)."""


NO_REPLY = NoReply()


def error_reply(exc: UjobsError) -> dict[str, Any]:
    """The engine's error reply: the error's code, message and hint."""
    return {"error": {"code": exc.code.value, "message": exc.message, "hint": exc.hint}}


def software_version() -> str:
    try:
        return version("ujobs-bridge")
    except PackageNotFoundError:
        return "0"


@dataclass
class ControlState:
    """What a handler sees: the worker, its node name and whatever a set adds (``extra``)."""

    worker: Steerable
    node: str
    started: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CommandSet:
    """Commands an upper package adds, answered as ``<name>.<command>``. ``failed(command,
    exc)`` is the set's reply when a handler raises, or ``KeyError(command)`` for a command the
    set does not have."""

    name: str
    handlers: Mapping[str, Handler]
    failed: Callable[[str, Exception], Any]


# ---------------------------------------------------------------------------- readers


def is_started(entry: InFlight) -> bool:
    """Has the attempt's body started, rather than waiting for a free slot?"""
    if entry.started:
        return True
    future = entry.future
    return future is not None and (future.running() or future.done())


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
    """For a hung body (still running past its timeout; its attempt already failed, and its
    thread was abandoned to a new one): ``hung``, ``overdue_s`` (seconds past its deadline) and
    ``timeout_s``; ``{}`` for any other attempt."""
    for h in state.worker.hung():
        if h.job_id == entry.claimed.id:
            return {"hung": True, "overdue_s": round(h.overdue_s, 3), "timeout_s": h.timeout_s}
    return {}


def attempt_info(state: ControlState, entry: InFlight) -> dict[str, Any]:
    """A held attempt in the engine's words: its job, the attempt, whether it runs, since when
    and until when (wall-clock seconds since the epoch), hung or not."""
    claimed = entry.claimed
    deadline = entry.deadline
    return {
        "job_id": str(claimed.id),
        "name": claimed.name,
        "queue": claimed.queue,
        "input": claimed.input,
        "attempt": claimed.attempt,
        "max_attempts": claimed.max_attempts,
        "deliveries": claimed.deliveries,
        "running": is_started(entry),
        "started_at": entry.started_at,
        "deadline_at": None if deadline is None else time.time() + deadline - time.monotonic(),
        "node": state.node,
        "pid": os.getpid(),
        "hung": False,
    } | hung_info(state, entry)


def pool_info(state: ControlState) -> dict[str, Any]:
    """The pool at its current size, its children's pids (``processes`` pool) and its limits."""
    worker = state.worker
    config = worker.config
    return {
        "kind": config.pool,
        "size": config.concurrency,
        "pids": worker.runtimes.pids(),
        "max_jobs_per_child": config.max_tasks_per_child,
        "max_memory_per_child_kib": config.max_memory_per_child_kib,
        "time_limit_s": config.time_limit_s,
        "soft_time_limit_s": config.soft_time_limit_s,
    }


# ---------------------------------------------------------------------------- reading commands


def ping(state: ControlState, **_: Any) -> dict[str, Any]:
    return {"pong": True, "node": state.node, "worker_id": state.worker.id, "pid": os.getpid()}


def stats(state: ControlState, **_: Any) -> dict[str, Any]:
    worker = state.worker
    usage = resource.getrusage(resource.RUSAGE_SELF)
    scaler = worker.autoscaler
    return {
        "node": state.node,
        "worker_id": worker.id,
        "pid": os.getpid(),
        "uptime_s": round(time.time() - state.started, 3),
        "software": {
            "name": SW_IDENT,
            "version": software_version(),
            "system": platform.system(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
        },
        "database": worker.dsn_host,
        "queues": list(worker.queues),
        "processed": dict(worker.processed),
        "prefetch": worker.config.capacity,
        "held": len(worker.table),
        "hung": len(worker.hung()),
        "pool": pool_info(state),
        "autoscale": None if scaler is None else scaler.info(),
        "task_events": worker.send_task_events,
        "rusage": {
            "utime": usage.ru_utime,
            "stime": usage.ru_stime,
            "maxrss": usage.ru_maxrss,
            "minflt": usage.ru_minflt,
            "majflt": usage.ru_majflt,
            "nvcsw": usage.ru_nvcsw,
            "nivcsw": usage.ru_nivcsw,
        },
    }


def attempts(
    state: ControlState, running: Any = None, job_ids: Any = None, **_: Any
) -> dict[str, Any]:
    """The attempts held: ``running`` True (bodies running, hung ones included), False (waiting
    for a slot) or None (both); ``job_ids``: only these."""
    entries: list[InFlight] = []
    for started in (True, False):
        if running is None or bool(running) is started:
            entries += held(state, started=started)
    if job_ids is not None:
        wanted = {str(i) for i in (job_ids if isinstance(job_ids, list | tuple) else [job_ids])}
        entries = [e for e in entries if str(e.claimed.id) in wanted]
    return {"attempts": [attempt_info(state, e) for e in entries]}


def queues(state: ControlState, **_: Any) -> dict[str, Any]:
    return {"queues": list(state.worker.queues)}


def jobs(state: ControlState, **_: Any) -> dict[str, Any]:
    return {"jobs": sorted(state.worker.names)}


# ---------------------------------------------------------------------------- steering commands


def consume(state: ControlState, queue: str = "", **_: Any) -> dict[str, Any]:
    """Consume ``queue`` too; an invalid name is refused (``UJ_QUEUE_NAME_INVALID``)."""
    validation.queue_name(queue)
    worker = state.worker
    changed = queue not in worker.queues
    if changed:
        worker.reload(worker.registry, (*worker.queues, queue))
        log.info("ujobs.control: consuming from %s", queue)
    return {"queues": list(worker.queues), "changed": changed}


def stop_consuming(state: ControlState, queue: str = "", **_: Any) -> dict[str, Any]:
    """Stop consuming ``queue``; the last queue is refused (a worker consumes at least one)."""
    worker = state.worker
    kept = tuple(q for q in worker.queues if q != queue)
    if not kept:
        raise ControlError(
            f"{queue} is the only queue this worker consumes: it would consume none",
            hint="consume another queue first, or shut the worker down",
        )
    changed = kept != worker.queues
    if changed:
        worker.reload(worker.registry, kept)
        log.info("ujobs.control: no longer consuming from %s", queue)
    return {"queues": list(worker.queues), "changed": changed}


def _resize(state: ControlState, command: str, size: int) -> dict[str, Any]:
    worker = state.worker
    if worker.autoscaler is not None:
        raise ControlError(
            f"{command}: the pool is autoscaled", hint="move its range with autoscale max= min="
        )
    reason = worker.resize(size)
    if reason:
        raise ControlError(reason, hint=f"{command} by a number that keeps the pool in range")
    log.info("ujobs.control: pool resized to %d", worker.config.concurrency)
    return {"size": worker.config.concurrency}


def pool_grow(state: ControlState, n: Any = 1, **_: Any) -> dict[str, Any]:
    return _resize(state, "pool_grow", state.worker.config.concurrency + int(n))


def pool_shrink(state: ControlState, n: Any = 1, **_: Any) -> dict[str, Any]:
    return _resize(state, "pool_shrink", state.worker.config.concurrency - int(n))


def autoscale(state: ControlState, max: Any = None, min: Any = None, **_: Any) -> dict[str, Any]:
    """Move the autoscale range (either bound may be left out); the pool is brought inside it
    at once. Refused on a worker started without ``--autoscale``."""
    scaler = state.worker.autoscaler
    if scaler is None:
        raise ControlError(
            "autoscale: this worker's pool is not autoscaled",
            hint="start the worker with --autoscale MAX,MIN; resize this one with pool_grow",
        )
    scaler.update(max, min)
    return scaler.info()


def task_events(state: ControlState, on: Any = True, **_: Any) -> dict[str, Any]:
    """Switch the worker's task events (``Worker.send_task_events``; its hooks hear it)."""
    changed = state.worker.set_task_events(bool(on)) != bool(on)
    if changed:
        log.info("ujobs.control: task events %s", "on" if on else "off")
    return {"task_events": bool(on), "changed": changed}


def shutdown(state: ControlState, **_: Any) -> NoReply:
    """Stop claiming; whoever runs the worker drains it as on SIGTERM. No reply."""
    log.warning("ujobs.control: shutdown requested remotely")
    state.worker.request_remote_shutdown()
    return NO_REPLY


COMMANDS: Mapping[str, Handler] = {
    "ping": ping,
    "stats": stats,
    "attempts": attempts,
    "queues": queues,
    "jobs": jobs,
    "consume": consume,
    "stop_consuming": stop_consuming,
    "pool_grow": pool_grow,
    "pool_shrink": pool_shrink,
    "autoscale": autoscale,
    "task_events": task_events,
    "shutdown": shutdown,
}


class Panel:
    """The commands one worker answers: the engine's, and each ``CommandSet`` under its prefix.
    Several mailboxes may dispatch to it (Postgres, and an app's broker during a cutover): one
    command runs at a time."""

    def __init__(self, state: ControlState, sets: Sequence[CommandSet] = ()) -> None:
        self.state = state
        self.handlers: dict[str, Handler] = dict(COMMANDS)
        self.sets: dict[str, CommandSet] = {}
        for added in sets:
            if not added.name or "." in added.name or added.name in self.sets:
                raise ControlError(
                    f"command set {added.name!r} is not a name of its own",
                    code=ErrorCode.CONFIG_INVALID,
                    hint="name each command set once, without dots",
                )
            self.sets[added.name] = added
        self._one_at_a_time = threading.Lock()

    @property
    def command_sets(self) -> list[str]:
        """The names of the sets this panel answers (the node row says them)."""
        return sorted(self.sets)

    def dispatch(self, command: str, arguments: Mapping[str, Any]) -> Any:
        """The reply value of ``command`` (``NO_REPLY`` for none); never raises."""
        prefix, dot, name = command.partition(".")
        if dot:
            return self._dispatch_in(prefix, name, arguments)
        handler = self.handlers.get(command)
        if handler is None:
            return error_reply(
                ControlError(
                    f"no command {command!r}",
                    code=ErrorCode.CONTROL_COMMAND_UNKNOWN,
                    hint=f"the engine's commands: {', '.join(sorted(self.handlers))}",
                )
            )
        try:
            with self._one_at_a_time:
                return handler(self.state, **dict(arguments))
        except UjobsError as exc:
            return error_reply(exc)
        except Exception as exc:
            log.error("ujobs.control: %s failed: %r", command, exc, exc_info=True)
            return error_reply(
                ControlError(f"{command} failed: {exc!r}", code=ErrorCode.CONTROL_FAILED)
            )

    def _dispatch_in(self, prefix: str, name: str, arguments: Mapping[str, Any]) -> Any:
        added = self.sets.get(prefix)
        if added is None:
            return NO_REPLY  # another kind of node's command
        try:
            handler = added.handlers[name]
            with self._one_at_a_time:
                return handler(self.state, **dict(arguments))
        except Exception as exc:
            return added.failed(name, exc)
