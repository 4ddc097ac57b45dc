"""LISTEN/NOTIFY wake-ups for an idle worker, on a dedicated connection.

Why it exists: polling alone makes pick-up latency the poll interval; a notification sent by the
insert trigger at commit wakes the claim loop within a millisecond. Polling stays the floor, so a
lost notification (connection drop, restart) costs at most one poll interval, never a job.
It also carries operator cancellations (``x_jobs_cancel``) so a cancel reaches a running body at
once instead of at the next heartbeat.

A ``Service`` (``service.py``): ``stop()`` lets the wait in flight end (at most 0.2 s), then
closes the connection.

What it is not: a delivery mechanism. A notification only says "look"; the claim decides.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

import psycopg

from .drivers.postgres.sql import q
from .service import Service

log = logging.getLogger("ujobs.listener")

READY_CHANNEL = "x_jobs_ready"
CANCEL_CHANNEL = "x_jobs_cancel"


class Listener(Service):
    """A ``Service`` whose pass waits up to 0.2 s for notifications on one kept connection;
    a dropped connection is re-opened after ``reconnect_s``, and then ``on_ready`` is called once
    for whatever was committed while nobody listened."""

    def __init__(
        self,
        dsn: str,
        *,
        queues: Collection[str],
        on_ready: Callable[[], None],
        on_cancel: Callable[[str], None],
        application_name: str,
        reconnect_s: float = 1.0,
    ) -> None:
        self.dsn = dsn
        self.queues = frozenset(queues)
        self.on_ready = on_ready
        self.on_cancel = on_cancel
        self.application_name = application_name
        self.reconnect_s = reconnect_s
        self._conn: psycopg.Connection[Any] | None = None
        self.listening = threading.Event()
        super().__init__("listener", interval_s=reconnect_s)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                application_name=self.application_name,
                connect_timeout=5,
            )
            self._conn.execute(q("listen_ready"))
            self._conn.execute(q("listen_cancel"))
            self.listening.set()
            self.on_ready()  # anything committed while we were not listening
        return self._conn

    def tick(self) -> int:
        """Deliver the notifications that arrive within 0.2 s (at most 64); returns how many."""
        seen = 0
        for note in self._connection().notifies(timeout=0.2, stop_after=64):
            seen += 1
            if note.channel == READY_CHANNEL:
                if note.payload in self.queues:
                    self.on_ready()
            elif note.channel == CANCEL_CHANNEL:
                self.on_cancel(note.payload)
        return seen

    def _pass(self) -> float:
        self.tick()
        return 0.0  # the wait for notifications is the pause

    def _on_error(self, exc: Exception) -> float:
        self._close()
        if isinstance(exc, psycopg.Error):
            log.warning("ujobs.listener.reconnect: %s", exc)
        else:
            log.exception("ujobs.listener.error")
        return self.reconnect_s

    def _on_stop(self) -> None:
        self._close()

    def _close(self) -> None:
        self.listening.clear()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
