"""The engine's remote control as an upper package extends it: a ``Panel`` of commands a worker
answers (handlers take the ``ControlState``), the replies ``ok``/``nok``/``NO_REPLY``, readers of
the attempts a worker holds, and the caller's side (``broadcast``, ``Reply``, live nodes).

What it is not: any one tool's reply shapes; an upper package maps its own commands onto these.
"""

from __future__ import annotations

from ujobs_bridge._internal.db.nodes import nodes_live
from ujobs_bridge._internal.db.steering import job_cancel
from ujobs_bridge._internal.worker.control import (
    NO_REPLY,
    ControlState,
    Handler,
    Panel,
    held,
    hung_info,
    is_started,
    nok,
    ok,
    request_info,
    stats,
)
from ujobs_bridge._internal.worker.remote import Reply, broadcast

__all__ = [
    "NO_REPLY",
    "ControlState",
    "Handler",
    "Panel",
    "Reply",
    "broadcast",
    "held",
    "hung_info",
    "is_started",
    "job_cancel",
    "nodes_live",
    "nok",
    "ok",
    "request_info",
    "stats",
]
