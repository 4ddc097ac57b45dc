"""Wake ``AsyncResult.get()`` when its result is written, instead of polling.

Why it exists: Celery's key/value backends poll every half second; a result written here sends
``NOTIFY x_celery_results, <key>`` in the same statement, and this service holds one LISTEN
connection per process and wakes exactly the waiters of that key. Waiters still re-read the
database after every wake and at a slow safety interval, so a dropped connection can delay a
wake but never lose it.

It is a ``ujobs_bridge._internal.service.Service``: ``start()`` (which also waits until LISTEN is in place)
and ``stop()`` are idempotent, ``stop()`` waits for the pass in flight (at most one
``NOTIFY_POLL_S`` wait), and ``tick()`` is one pass. Its connection comes from
``ujobs_bridge._internal.db.connections`` and is reopened after an error.

Its DSN is the listen DSN (``ujobs_bridge._internal.db.connections.listen_dsn``: ``ujobs_listen_url``,
``UJOBS_LISTEN_URL``, else the jobs database unless that goes through PgBouncer). With none it
listens on nothing (``polling``): waiters then re-read at their own interval (``get(interval=)``,
Celery's 0.5 s by default).

What it is not: a result cache or a store; the database stays the only truth.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

import psycopg

from celery_compat.db import result_store
from ujobs_bridge.ext.database import Reconnecting, Role
from ujobs_bridge.ext.worker import Service

log = logging.getLogger(__name__)

RECONNECT_DELAY_S = 1.0
NOTIFY_POLL_S = 1.0
LISTEN_READY_S = 5.0
RESULTS_ROLE = Role("celery:results")


class ResultListener(Service):
    """A LISTEN connection and the waiters per key."""

    def __init__(self, dsn: str | None) -> None:
        super().__init__("celery-results", interval_s=0.0)
        self.dsn = dsn
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._ready = threading.Event()
        self._conn = Reconnecting(dsn or "", RESULTS_ROLE, checked=False)
        self._listening = False

    @property
    def polling(self) -> bool:
        """True without a listen DSN: no wake-ups, waiters re-read at their own interval."""
        return self.dsn is None

    # ------------------------------------------------------------------ lifecycle (``Service``)

    def start(self) -> None:
        if self.polling:
            return
        super().start()
        self._ready.wait(LISTEN_READY_S)  # LISTEN is in place before the first waiter reads the row

    def _on_start(self) -> None:
        self._ready.clear()

    def _on_stop(self) -> None:
        self._conn.close()
        self._listening = False

    def _on_error(self, exc: Exception) -> float:
        if not isinstance(exc, psycopg.Error):
            return super()._on_error(exc)
        log.warning("result listener lost its connection (%s); reconnecting", exc)
        self._conn.reset()
        self._listening = False
        self._ready.set()
        self._wake(None)
        return RECONNECT_DELAY_S

    def tick(self, timeout_s: float = NOTIFY_POLL_S) -> int:
        """One pass: (re)open the LISTEN connection if needed, then deliver the notifications
        that arrive within ``timeout_s``; returns how many."""
        if not self._listening or not self._conn.open:
            conn = self._conn.get()
            result_store.listen_results(conn)
            self._listening = True
            self._ready.set()
            self._wake(None)  # anything written while we were away: re-read
        return self.deliver(self._conn.get(), timeout_s)

    # ------------------------------------------------------------------ waiters

    def watch(self, keys: Iterable[str]) -> threading.Event:
        """An event set whenever one of ``keys`` is written (register BEFORE reading the row)."""
        self.start()
        event = threading.Event()
        with self._lock:
            for key in keys:
                self._waiters.setdefault(key, set()).add(event)
        return event

    def unwatch(self, keys: Iterable[str], event: threading.Event) -> None:
        with self._lock:
            for key in keys:
                bucket = self._waiters.get(key)
                if bucket is not None:
                    bucket.discard(event)
                    if not bucket:
                        del self._waiters[key]

    def deliver(self, conn: psycopg.Connection[object], timeout_s: float = NOTIFY_POLL_S) -> int:
        """Deliver the notifications that arrive on ``conn`` within ``timeout_s``; returns how
        many."""
        delivered = 0
        for notify in conn.notifies(timeout=timeout_s, stop_after=256):
            delivered += 1
            self._wake([notify.payload])
        return delivered

    def _wake(self, keys: Iterable[str] | None) -> None:
        with self._lock:
            if keys is None:
                events = {e for bucket in self._waiters.values() for e in bucket}
            else:
                events = {e for k in keys for e in self._waiters.get(k, ())}
        for event in events:
            event.set()
