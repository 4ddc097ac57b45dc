"""The worker's remote-control surface: what ``control`` commands change, and what its node says.

Why it exists: ``shutdown``, ``task_events`` and ``pool_grow``/``pool_shrink`` change a running
worker, and the node row (``presence.py``) reports what status tools read. Kept
apart from the claim loop (``loop.py``), which it steers only through the worker's own settings:
its config, its runtimes, its stop request.

What it is not: the command panel (``control.py``) or the mailbox (``presence.py``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ujobs_bridge._internal.db import nodes
from ujobs_bridge.errors import ConfigError

if TYPE_CHECKING:
    from ujobs_bridge._internal.worker.claims import Claims
    from ujobs_bridge._internal.worker.config import WorkerConfig
    from ujobs_bridge._internal.worker.inflight import InFlightTable
    from ujobs_bridge._internal.worker.presence import Presence
    from ujobs_bridge._internal.worker.runtimes import Runtimes


class Steering:
    """Mixed into ``Worker``: the attributes below are the worker's own."""

    id: str
    node: str
    queues: tuple[str, ...]
    names: tuple[str, ...]
    config: WorkerConfig
    claims: Claims
    runtimes: Runtimes
    presence: Presence
    table: InFlightTable
    processed: dict[str, int]
    send_task_events: bool
    task_events_hooks: list[Callable[[bool], None]]
    remote_shutdown: threading.Event
    _wake: threading.Event

    def request_stop(self) -> None:
        raise NotImplementedError

    def request_remote_shutdown(self) -> None:
        """A ``shutdown`` command: stop claiming; whoever runs the worker stops it (the CLI
        drains as on SIGTERM)."""
        self.remote_shutdown.set()
        self.request_stop()

    def set_task_events(self, on: bool) -> bool:
        """Set ``send_task_events``; returns the previous value. Hooks hear every change."""
        previous, self.send_task_events = self.send_task_events, on
        if previous != on:
            for hook in list(self.task_events_hooks):
                hook(on)
        return previous

    def resize(self, concurrency: int, *, bounds: tuple[int, int] | None = None) -> str | None:
        """Run ``concurrency`` bodies at once from now on (body threads or pool children are
        added, or retire once free); ``bounds``: the autoscaler's (max, min), kept in the config.
        The reason when it cannot."""
        try:
            config = dataclasses.replace(
                self.config,
                concurrency=concurrency,
                autoscale=bounds if bounds is not None else self.config.autoscale,
            )
        except ConfigError as exc:
            return exc.render()
        self.runtimes.resize(concurrency)
        self.config = self.claims.config = config
        self.presence.refresh_soon()
        self._wake.set()
        return None

    def _describe(self) -> nodes.NodeSpec:
        """What the node row says (``presence.py`` writes it at every beat)."""
        return nodes.NodeSpec(
            worker_id=self.id,
            name=self.node,
            hostname=self.node.partition("@")[2] or socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.config.concurrency,
            pool=self.config.pool,
            info={
                "sw_ident": "ujobs-bridge",
                "registered": list(self.names),
                "processed": dict(self.processed),
                "prefetch_count": self.config.capacity,
                "freq": self.config.heartbeat_interval_s,
                "active": len(self.table),
            },
        )
