"""Raise an exception inside a running task body: time limits and ``revoke(terminate=True)``.

Why it exists: Celery enforces ``soft_time_limit`` by raising ``SoftTimeLimitExceeded`` inside
the task, ``time_limit`` by killing the pool process, and ``terminate`` with a signal. Bridge
bodies run in worker threads, so one watcher thread per process checks the running bodies every
``TICK_S`` and raises the right exception in the body's thread (``PyThreadState_SetAsyncExc``):
``SoftTimeLimitExceeded`` at the soft limit (the body may catch it, as in Celery), and at the
hard limit or when the job was cancelled under it a ``BodyKilled`` the body cannot swallow with
``except Exception`` (Celery kills the process there).

What it is not: a process killer, nor what a ``-P prefork`` child uses for its limits (there the
pool signals the child's main thread at the soft limit and kills the child at the hard one, as
billiard does: ``ujobs_bridge.ext.worker.pool_time_limits``; only a cancel is watched here). An
exception raised this way lands when the thread next runs Python bytecode: a body thread blocked
inside one long call (``time.sleep``, a socket read without a timeout) is interrupted when that
call returns. Give such calls their own timeouts, or run the task under ``-P prefork``.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from celery import exceptions as celery_exceptions

from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.ext.jobs import AttemptSignal
from ujobs_bridge.ext.worker import Service

TICK_S = 0.05


class BodyKilled(BaseException):
    """Raised where Celery would kill the pool process (hard time limit, ``terminate``).

    A ``BaseException`` so neither the body's ``except Exception:`` nor Celery's tracer takes it
    for the task's own failure: the executor records what Celery's worker records for a killed
    child (FAILURE ``TimeLimitExceeded``, or REVOKED)."""


class HardTimeLimit(BodyKilled):
    """The hard ``time_limit`` passed."""


class TerminatedByRevoke(BodyKilled):
    """``revoke(terminate=True)`` cancelled the running job."""


SOFT: type[BaseException] = celery_exceptions.SoftTimeLimitExceeded
HARD: type[BaseException] = HardTimeLimit
TERMINATED: type[BaseException] = TerminatedByRevoke


@dataclass(slots=True)
class Watched:
    thread_id: int
    signal: AttemptSignal
    soft_deadline: float | None
    hard_deadline: float | None
    fired: set[str] = field(default_factory=set)
    # Asked once when the job is cancelled under a running body: interrupt it (terminate=True,
    # or an operator's cancel) or let it finish (a plain revoke reaching a started task).
    should_terminate: Callable[[], bool] | None = None


def _raise_in(thread_id: int, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )


class Interrupter(Service):
    """The watcher service (a ``Service``): ``start()``/``stop()`` idempotent, a pass every
    ``TICK_S``, ``tick()`` for tests."""

    def __init__(self) -> None:
        super().__init__("celery-limits", interval_s=TICK_S, wait_first=True)
        self._lock = threading.Lock()
        self._watched: dict[int, Watched] = {}

    def watch(
        self,
        signal: AttemptSignal,
        soft_s: float | None,
        hard_s: float | None,
        should_terminate: Callable[[], bool] | None = None,
    ) -> Watched:
        now = time.monotonic()
        entry = Watched(
            threading.get_ident(),
            signal,
            None if not soft_s else now + soft_s,
            None if not hard_s else now + hard_s,
            should_terminate=should_terminate,
        )
        with self._lock:
            self._watched[entry.thread_id] = entry
        if self._thread is None:  # the watcher is started once (start() takes a lock)
            self.start()
        return entry

    def unwatch(self, entry: Watched) -> None:
        with self._lock:
            if self._watched.get(entry.thread_id) is entry:
                del self._watched[entry.thread_id]

    def tick(self, now: float | None = None) -> int:
        """Fire what is due; returns how many exceptions were raised."""
        now = time.monotonic() if now is None else now
        fired = 0
        with self._lock:
            for entry in self._watched.values():
                exc = self._due(entry, now)
                if exc is not None:
                    _raise_in(entry.thread_id, exc)
                    fired += 1
        return fired

    @staticmethod
    def _due(entry: Watched, now: float) -> type[BaseException] | None:
        if entry.signal.aborted and entry.signal.code is ErrorCode.JOB_CANCELLED:
            if "cancel" in entry.fired:
                return None
            entry.fired.add("cancel")
            if entry.should_terminate is None or entry.should_terminate():
                entry.fired.add("terminate")
                return TERMINATED
            return None
        if (
            entry.hard_deadline is not None
            and now >= entry.hard_deadline
            and "hard" not in entry.fired
        ):
            entry.fired.add("hard")
            return HARD
        if (
            entry.soft_deadline is not None
            and now >= entry.soft_deadline
            and "soft" not in entry.fired
        ):
            entry.fired.add("soft")
            return SOFT
        return None


INTERRUPTER = Interrupter()
