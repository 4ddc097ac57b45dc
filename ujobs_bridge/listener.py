"""LISTEN/NOTIFY wake-ups for an idle worker, on a dedicated connection.

Why it exists: polling alone makes pick-up latency the poll interval; a notification sent by the
insert trigger at commit wakes the claim loop within a millisecond. Polling stays the floor, so a
lost notification (connection drop, restart) costs at most one poll interval, never a job.
It also carries operator cancellations (``x_jobs_cancel``) so a cancel reaches a running body at
once instead of at the next heartbeat.

What it is not: a delivery mechanism. A notification only says "look"; the claim decides.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

import psycopg

from .drivers.postgres.sql import q

log = logging.getLogger("ujobs.listener")

READY_CHANNEL = "x_jobs_ready"
CANCEL_CHANNEL = "x_jobs_cancel"


class Listener:
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
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self.listening = threading.Event()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ujobs-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self.dsn,
                    autocommit=True,
                    application_name=self.application_name,
                    connect_timeout=5,
                ) as conn:
                    conn.execute(q("listen_ready"))
                    conn.execute(q("listen_cancel"))
                    self.listening.set()
                    self.on_ready()  # anything committed while we were not listening
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.2, stop_after=64):
                            if note.channel == READY_CHANNEL:
                                if note.payload in self.queues:
                                    self.on_ready()
                            elif note.channel == CANCEL_CHANNEL:
                                self.on_cancel(note.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning("ujobs.listener.reconnect: %s", exc)
                self._stop.wait(self.reconnect_s)
        self.listening.clear()
