"""The worker as an upper package runs and extends it: the loop, its settings, the in-flight
table its commands read, extra wake-up channels, the ``Service`` shape of every loop, and the
named fault points tests arm.

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

__all__ = ["ExtraChannel", "InFlight", "Service", "Worker", "WorkerConfig", "fault"]
