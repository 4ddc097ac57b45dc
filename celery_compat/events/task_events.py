"""Celery's task events, with Celery's names and fields, at the moments the bridge runs a message.

Why it exists: monitors (Flower, ``celery events``, anything on ``app.events.Receiver`` or
``app.events.State``) read a worker through its events. ``execution.py`` calls these functions
where Celery's worker would send each event (``celery/worker/strategy.py`` and
``celery/worker/request.py`` name the moments), with the same fields and value types:

=================  =========================================================================
task-sent          (producer, ``task_send_sent_event``) uuid, root_id, parent_id, name, args,
                   kwargs, retries, eta, expires, queue, exchange, routing_key
task-received      uuid, name, args, kwargs (the reprs), root_id, parent_id, retries, eta, expires
task-started       uuid
task-succeeded     uuid, result (the repr, ``resultrepr_maxsize``), runtime (seconds)
task-failed        uuid, exception (repr), traceback (text)
task-retried       uuid, exception (repr of the ``Retry``), traceback
task-revoked       uuid, terminated, signum, expired
task-rejected      uuid, requeue
=================  =========================================================================

Every event also carries what Celery's dispatcher adds: type, hostname (the worker's node name,
as ``-n`` gave it), utcoffset, pid (the worker's main process, as Celery's consumer sends them),
clock and timestamp (``event_emitter.py``). A task whose ``send_events`` is False sends none,
as in Celery.

Which process: the one that runs the body (the worker, or a ``--pool processes`` child), bound
to its node by ``worker_events.py``. Events are on while ``event_switch.enabled()``; when they
are off, or no node is bound (the engine's tests, eager mode), every function returns at once.

What it is not: worker events (``worker_events.py``) or their transport (``event_emitter.py``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from celery import states
from celery.exceptions import Reject
from kombu.utils.encoding import safe_repr, safe_str

from celery_compat.events import switch as event_switch
from celery_compat.events.emitter import EventEmitter, emitter_for


@dataclass(frozen=True, slots=True)
class Node:
    """The worker node this process emits task events for."""

    emitter: EventEmitter
    hostname: str
    pid: int

    def send(self, type_: str, task_id: str, **fields: Any) -> None:
        self.emitter.emit(type_, self.hostname, self.pid, uuid=task_id, **fields)


_node: list[Node] = []


def bind_node(emitter: EventEmitter, hostname: str, pid: int) -> Node:
    """Task events of this process are sent for node ``hostname`` (worker main pid ``pid``)."""
    node = Node(emitter, hostname, pid)
    _node[:] = [node]
    return node


def unbind_node() -> None:
    _node.clear()


def node(task: Any = None) -> Node | None:
    """The node to send task events for, or None when events are off (the hot path's check)."""
    if not _node or not event_switch.enabled():
        return None
    if task is not None and not getattr(task, "send_events", True):
        return None
    return _node[0]


def _repr(value: Any) -> str:
    return str(safe_repr(value))  # type: ignore[no-untyped-call]


# -- the worker's events ---------------------------------------------------------------------------


def received(target: Node, message: Any) -> None:
    headers = message.headers
    target.send(
        "task-received",
        message.task_id,
        name=message.task,
        args=headers.get("argsrepr") or _repr(tuple(message.args)),
        kwargs=headers.get("kwargsrepr") or _repr(dict(message.kwargs)),
        root_id=headers.get("root_id"),
        parent_id=headers.get("parent_id"),
        retries=int(headers.get("retries") or 0),
        eta=_instant(headers.get("eta")),
        expires=_instant(headers.get("expires")),
    )


def _instant(value: Any) -> str | None:
    """Celery's ``req.eta and req.eta.isoformat()``: ISO text or None."""
    if not value:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def started(target: Node, task_id: str) -> None:
    target.send("task-started", task_id)


def revoked(target: Node, task_id: str, *, expired: bool, terminated: bool) -> None:
    target.send(
        "task-revoked",
        task_id,
        terminated=terminated,
        signum=15 if terminated else None,
        expired=expired,
    )


def failed(target: Node, task_id: str, exc: Any, traceback: str | None) -> None:
    target.send("task-failed", task_id, exception=_repr(exc), traceback=traceback)


def rejected(target: Node, task_id: str, rejection: Reject, result: Any) -> None:
    """Celery 5.7: ``Reject(requeue=False)`` reads FAILURE (task-failed), then task-rejected.
    ``result``: what ``trace_task`` returned, None when the rejection came from outside it."""
    if not rejection.requeue:
        traceback = getattr(result[0], "traceback", None) if result is not None else None
        failed(target, task_id, rejection, traceback)
    target.send("task-rejected", task_id, requeue=bool(rejection.requeue))


def traced(target: Node, task_id: str, result: Any) -> None:
    """The event for what ``trace_task`` returned: ``(retval, info, runtime, retstr)``."""
    retval, info, runtime, retstr = result
    state = states.SUCCESS if info is None else info.state
    if state == states.SUCCESS:
        target.send("task-succeeded", task_id, result=retstr, runtime=runtime)
    elif state == states.RETRY:
        target.send(
            "task-retried",
            task_id,
            exception=_repr(getattr(info, "retval", None)),
            traceback=str(safe_str(getattr(retval, "traceback", "") or "")),  # type: ignore[no-untyped-call]
        )
    elif state == states.FAILURE:
        failed(target, task_id, getattr(info, "retval", retval), getattr(retval, "traceback", None))
    # IGNORED sends nothing (Celery acknowledges an Ignore silently); REJECTED is ``rejected``


# -- the producer's event ---------------------------------------------------------------------------

_anon: list[tuple[int, str]] = []


def _anon_nodename() -> str:
    """Celery's sender names itself ``gen<pid>@<host>`` (``anon_nodename``)."""
    pid = os.getpid()
    if not _anon or _anon[0][0] != pid:
        _anon[:] = [(pid, f"gen{pid}@{socket.gethostname()}")]
    return _anon[0][1]


def sent(app: Any, sent_event: dict[str, Any], **where: Any) -> None:
    """``task-sent`` for a message written to Postgres, as Celery's sender publishes it when
    ``task_send_sent_event`` is set (``sent_event``: the fields ``create_task_message`` built;
    ``where``: queue, exchange, routing_key)."""
    fields = dict(sent_event)
    fields.update(where)
    task_id = str(fields.pop("uuid"))
    emitter_for(app).emit("task-sent", _anon_nodename(), os.getpid(), uuid=task_id, **fields)
