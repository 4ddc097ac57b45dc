"""The engine's remote control as an upper package extends it: the engine's commands (handlers
that take the ``ControlState`` and return the engine's reply dicts or raise a ``UjobsError``:
``ping``, ``stats``, ``attempts``, ``queues``, ``jobs``, ``consume``, ``stop_consuming``,
``pool_grow``, ``pool_shrink``, ``autoscale``, ``task_events``, ``shutdown``), a ``CommandSet``
an upper package adds under its own prefix (``<set>.<command>``) to answer in its own words,
``NO_REPLY``, the engine's ``error_reply``, readers of the attempts a worker holds, and the
caller's side (``broadcast`` with its ``command_set``, ``Reply``, live nodes).

What it is not: any one tool's reply shapes; an upper package maps its own commands onto these
(celery_compat: Celery's ``inspect``/``control`` as the set ``celery``).
"""

from __future__ import annotations

from ujobs_bridge._internal.db.nodes import nodes_live
from ujobs_bridge._internal.db.steering import job_cancel
from ujobs_bridge._internal.worker.control import (
    NO_REPLY,
    CommandSet,
    ControlState,
    Handler,
    NoReply,
    Panel,
    attempt_info,
    attempts,
    autoscale,
    consume,
    error_reply,
    held,
    hung_info,
    is_started,
    jobs,
    ping,
    pool_grow,
    pool_shrink,
    queues,
    shutdown,
    stats,
    stop_consuming,
    task_events,
)
from ujobs_bridge._internal.worker.remote import Reply, broadcast

__all__ = [
    "NO_REPLY",
    "CommandSet",
    "ControlState",
    "Handler",
    "NoReply",
    "Panel",
    "Reply",
    "attempt_info",
    "attempts",
    "autoscale",
    "broadcast",
    "consume",
    "error_reply",
    "held",
    "hung_info",
    "is_started",
    "job_cancel",
    "jobs",
    "nodes_live",
    "ping",
    "pool_grow",
    "pool_shrink",
    "queues",
    "shutdown",
    "stats",
    "stop_consuming",
    "task_events",
]
