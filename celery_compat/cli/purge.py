"""``celery -A proj purge`` on a celery_compat app: purges the ready messages in Postgres.

Why it exists: Celery's ``purge`` command does not call ``app.control.purge()``; it opens
``app.connection_for_write()`` and calls ``queue_purge(name)`` on its default channel for each
queue (``celery/bin/purge.py``). A celery_compat app's queues are in Postgres, so while that
command runs (and only then: the broker connection still serves ``ujobs_broker_tasks`` and
events), ``connection_for_write()`` answers with ``PostgresPurgeConnection``, whose
``queue_purge`` cancels the queue's ready messages without an ``eta``
(``control.BridgeControl.purge_queues``; ETA messages a Celery worker would hold unacked) and
returns how many, which the command counts and prints in its own words.

What it is not: a kombu transport. It has exactly what the command touches.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

import click


def running() -> bool:
    """Is Celery's ``purge`` command the command being run in this process right now?"""
    module = sys.modules.get("celery.bin.purge")
    if module is None:
        return False

    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.command is getattr(module, "purge", None)


class _Channel:
    def __init__(self, app: Any) -> None:
        self.app = app

    def queue_purge(self, queue: str, **_: Any) -> int:
        return int(self.app.control.purge_queues([queue]).get(str(queue), 0))


class PostgresPurgeConnection:
    """What ``celery purge`` uses of a connection: ``default_channel.queue_purge``,
    ``channel_errors`` and the context manager."""

    channel_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, app: Any) -> None:
        self.default_channel = _Channel(app)

    def __enter__(self) -> PostgresPurgeConnection:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def release(self) -> None:
        return None
