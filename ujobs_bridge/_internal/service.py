"""``Service``: the one shape of every background loop: ``start`` / ``stop`` / ``tick``.

Why it exists: the heartbeat, the LISTEN loop, the scheduler and the outbox relay each run a pass
on a thread, again and again, until told to stop, and each must stop the same way:
stop taking new work at once, let the pass in flight finish, then release what it holds. Written
once, a loop cannot forget half of it (a stop that does not wait lets a scheduler resign while its
round still fires; a loop that dies on the first unexpected error stops renewing leases). A
subclass supplies ``tick()``, one pass that tests call directly with a frozen clock, and
optionally ``_pass()`` (a tick plus how long to wait before the next), ``_on_start``,
``_on_stop`` and ``_on_error``.

A pass that raises an ``Exception`` is logged and the loop goes on after a pause. A loop that
cannot go on (an error no ``except Exception`` catches, such as ``SystemExit`` raised on its
thread, an ``_on_error`` that raises, or ``error_streak`` failed passes in a row that were not
database errors) is *dead*: it logs why and calls ``on_died(name, exc)``, so its owner can stop
instead of living on without it (a worker whose claim loop died must not keep renewing leases).

What it is not: a supervisor or a scheduler. A service never restarts itself after ``stop()``
unless ``start()`` is called again, and its interval is a pause between passes, not a timetable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

log = logging.getLogger("ujobs.service")


class Service:
    """A loop on its own daemon thread: ``tick()`` every ``interval_s`` until ``stop()``."""

    def __init__(
        self,
        name: str,
        *,
        interval_s: float,
        wait_first: bool = False,
        error_streak: int | None = None,
    ) -> None:
        self.service_name = name
        self.interval_s = interval_s
        self.wait_first = wait_first
        self.error_streak = error_streak  # None: unexpected errors never end the loop
        self.on_died: Callable[[str, BaseException], None] | None = None
        self._stop = threading.Event()
        self.started = threading.Event()  # set once start() has launched the loop
        self.stopped = threading.Event()  # set once stop() has joined it and released what it held
        self._thread: threading.Thread | None = None
        self._lifecycle = threading.Lock()

    # ------------------------------------------------------------------ what a subclass supplies

    def tick(self) -> Any:
        """One pass. Called by the loop, and by tests directly."""
        raise NotImplementedError

    def _pass(self) -> float:
        """One pass of the loop; returns how long to wait before the next (0: at once)."""
        self.tick()
        return self.interval_s

    def _on_start(self) -> None:
        """Runs in ``start()`` before the thread does."""

    def _on_stop(self) -> None:
        """Runs in ``stop()`` once the pass in flight has finished: release what the loop holds."""

    def _on_error(self, exc: Exception) -> float:
        """A pass raised; the loop goes on after the returned pause."""
        if isinstance(exc, psycopg.Error):
            log.warning("ujobs.%s.error: %s", self.service_name, exc)
        else:
            log.exception("ujobs.%s.error", self.service_name)
        return self.interval_s

    # ------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        """Start the loop. Idempotent: a running service is left as it is."""
        with self._lifecycle:
            if self._thread is not None:
                return
            self._stop.clear()
            self.stopped.clear()
            self._on_start()
            self._thread = threading.Thread(
                target=self._run, name=f"ujobs-{self.service_name}", daemon=True
            )
            self._thread.start()
            self.started.set()

    def request_stop(self) -> None:
        """Take no further pass (safe from a signal handler); ``stop()`` still has to be called."""
        self._stop.set()

    def stop(self) -> None:
        """Stop at once, wait for the pass in flight, then ``_on_stop``. Idempotent; safe before
        ``start()``."""
        self._stop.set()
        with self._lifecycle:
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._on_stop()
        self.started.clear()
        self.stopped.set()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the loop cannot go on: say so, and tell the owner
            log.critical("ujobs.%s.died: %r", self.service_name, exc, exc_info=exc)
            if self.on_died is not None:
                self.on_died(self.service_name, exc)

    def _loop(self) -> None:
        if self.wait_first and self._stop.wait(self.interval_s):
            return
        streak = 0
        while not self._stop.is_set():
            try:
                pause = self._pass()
                streak = 0
            except Exception as exc:  # a loop that dies silently is worse than any one error
                pause = self._on_error(exc)
                if not isinstance(exc, psycopg.Error):
                    streak += 1
                    if self.error_streak is not None and streak >= self.error_streak:
                        raise
            if pause > 0:
                self._stop.wait(pause)
