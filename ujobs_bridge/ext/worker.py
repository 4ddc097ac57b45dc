"""The worker as an upper package runs and extends it: the loop, its settings, the in-flight
table its commands read, extra wake-up channels, the ``Service`` shape of every loop, the named
fault points tests arm, and the time limits a ``--pool processes`` child's body hands to the pool
(``pool_time_limits``: a signal at the soft limit, the child killed at the hard one).

What it is not: the worker's command line (``ujobs_bridge.ext.cli``) or its remote control
(``ujobs_bridge.ext.control``).
"""

from __future__ import annotations

from ujobs_bridge._internal.faults import fault
from ujobs_bridge._internal.service import Service
from ujobs_bridge._internal.worker.config import WorkerConfig
from ujobs_bridge._internal.worker.inflight import InFlight
from ujobs_bridge._internal.worker.listener import ExtraChannel
from ujobs_bridge._internal.worker.loop import Worker
from ujobs_bridge._internal.worker.pool_limits import keep as pool_time_limits
from ujobs_bridge._internal.worker.pool_limits import kept_by_pool as limits_kept_by_pool

__all__ = [
    "ExtraChannel",
    "InFlight",
    "Service",
    "Worker",
    "WorkerConfig",
    "fault",
    "limits_kept_by_pool",
    "pool_time_limits",
]
