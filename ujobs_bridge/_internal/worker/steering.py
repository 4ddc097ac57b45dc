"""What remote control and the autoscaler see of a running worker, and may change: ``Steerable``.

Why it exists: the command panel (``control.py``, and the handlers an app adds through
``LoadedApp.control_commands``) and the autoscaler (``autoscale.py``) read a worker's state and
steer it (consume another queue, resize the pool, shut down, switch task events). They sit below
the worker (``loop.py``), which composes them: they see it through this protocol, so none of them
imports the claim loop back. ``loop.Worker`` is the one implementation. ``TaskSettings`` (the
per-task settings remote control changes, sent to pool children) lives here for the same reason.

What it is not: the steering itself (``Worker.resize``, ``Worker.set_task_events``...) or the
command panel (``control.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ujobs_bridge._internal.worker.config import WorkerConfig
from ujobs_bridge._internal.worker.inflight import HungAttempt, InFlightTable
from ujobs_bridge.job import JobDefinition

# task name -> attribute -> value, as remote control set them in the parent (picklable)
TaskSettings = dict[str, dict[str, Any]]


class Scaler(Protocol):
    """The autoscaler, as ``inspect stats`` and the ``autoscale`` command use it."""

    def info(self) -> dict[str, int]: ...
    def update(self, most: object = None, least: object = None) -> tuple[int, int]: ...


class Pool(Protocol):
    """The worker's runtimes, as ``inspect stats`` reads them."""

    def pids(self) -> list[int]: ...


class Steerable(Protocol):
    """A running worker, as a remote-control handler or the autoscaler sees it."""

    @property
    def id(self) -> str: ...
    @property
    def dsn_host(self) -> str: ...
    @property
    def queues(self) -> tuple[str, ...]: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def registry(self) -> Mapping[str, JobDefinition[Any, Any]]: ...
    @property
    def config(self) -> WorkerConfig: ...
    @property
    def table(self) -> InFlightTable: ...
    @property
    def runtimes(self) -> Pool: ...
    @property
    def autoscaler(self) -> Scaler | None: ...
    @property
    def processed(self) -> Mapping[str, int]: ...
    @property
    def task_settings(self) -> TaskSettings: ...
    @property
    def send_task_events(self) -> bool: ...

    def in_flight(self) -> int: ...
    def hung(self) -> Sequence[HungAttempt]: ...
    def reload(
        self, registry: Mapping[str, JobDefinition[Any, Any]], queues: Sequence[str] | None = None
    ) -> None: ...
    def resize(self, concurrency: int, *, bounds: tuple[int, int] | None = None) -> str | None: ...
    def set_task_events(self, on: bool) -> bool: ...
    def request_remote_shutdown(self) -> None: ...
