"""Wake ``AsyncResult.get()`` when its result is written, instead of polling.

Why it exists: Celery's key/value backends poll every half second; a result written here sends
``NOTIFY x_celery_results, <key>`` in the same statement, and this service holds one LISTEN
connection per process and wakes exactly the waiters of that key. Waiters still re-read the
database after every wake and at a slow safety interval, so a dropped connection can delay a
wake but never lose it.

What it is not: a result cache or a store; the database stays the only truth.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

import psycopg

from .db import result_store

log = logging.getLogger(__name__)

RECONNECT_DELAY_S = 1.0
NOTIFY_POLL_S = 1.0


class ResultListener:
    """A LISTEN connection and the waiters per key. ``start()``/``stop()`` are idempotent."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._ready.clear()
            self._thread = threading.Thread(
                target=self._run, name="celery-compat-results", daemon=True
            )
            self._thread.start()
        self._ready.wait(5.0)  # LISTEN is in place before the first waiter reads the row

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(NOTIFY_POLL_S * 3)
        self._thread = None

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

    def tick(self, conn: psycopg.Connection[object], timeout_s: float = NOTIFY_POLL_S) -> int:
        """Deliver the notifications that arrive within ``timeout_s``; returns how many."""
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

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    result_store.listen_results(conn)
                    self._ready.set()
                    self._wake(None)  # anything written while we were away: re-read
                    while not self._stop.is_set():
                        self.tick(conn)
            except psycopg.Error as exc:
                log.warning("result listener lost its connection (%s); reconnecting", exc)
                self._ready.set()
                self._wake(None)
                self._stop.wait(RECONNECT_DELAY_S)
