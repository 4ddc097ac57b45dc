"""What a running job body can know about its own attempt, and the signal that stops it.

Why it exists: cancellation, lease loss, a per-attempt timeout and a worker shutdown must all reach
the body. A sync body cannot be interrupted safely from outside, so it gets a cooperative signal:
``current_job().cancelled`` to poll, ``check()`` to raise, ``wait(seconds)`` to sleep in a way that
wakes at once when the attempt is stopped. Async bodies are also cancelled as asyncio tasks.

What it is not: a place for step state (durable steps get their own module).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.jobs.payload import DEFAULT_MAX_RESULT_BYTES
from ujobs_bridge.errors import AttemptAborted, ErrorCode


@dataclass(slots=True)
class AttemptSignal:
    """Set once, by whoever stops the attempt first; the reason of the first setter wins.
    ``certain`` is False for a lease the worker could not renew for a lease's length (cut off,
    or the database down): it may still hold it, so whatever the body ends with is written,
    fenced by its token, instead of being dropped."""

    event: threading.Event = field(default_factory=threading.Event)
    code: ErrorCode | None = None
    reason: str = ""
    certain: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def abort(self, code: ErrorCode, reason: str, *, certain: bool = True) -> bool:
        with self._lock:
            if self.event.is_set():
                return False
            self.code, self.reason, self.certain = code, reason, certain
            self.event.set()
            return True

    @property
    def aborted(self) -> bool:
        return self.event.is_set()


@dataclass(frozen=True, slots=True)
class JobContext:
    id: UUID
    name: str
    queue: str
    attempt: int
    max_attempts: int
    signal: AttemptSignal
    clock: Clock = SYSTEM_CLOCK
    database: Callable[[], AbstractContextManager[psycopg.Connection[Any]]] | None = None
    deliveries: int = 1
    # the worker's --max-result-bytes: a result store running in the body (a Celery app's
    # result backend) holds a result to the same limit as the job's own
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    # the worker's "this attempt's real work starts now", for a body whose definition has
    # ``work_starts_late`` (``work_starts``); None when its start is recorded as it begins
    starting: Callable[[], object] | None = None

    @property
    def redelivered(self) -> bool:
        """True when the row was claimed before this attempt: a snooze, a rescue after a lost
        lease or the shutdown's hand-back (which, unlike failures, do not all count an attempt)."""
        return self.deliveries > 1

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection to the jobs database (autocommit), for work that belongs next to the
        jobs, such as the retention sweep."""
        if self.database is None:
            raise RuntimeError(
                "this attempt has no jobs-database connection (it runs outside a worker)"
            )
        return self.database()

    @property
    def cancelled(self) -> bool:
        """True once the attempt was cancelled, timed out, lost its lease or is being handed back by a worker shutdown."""
        return self.signal.aborted

    def check(self) -> None:
        """Raise ``AttemptAborted`` if the attempt must stop; call it between units of work."""
        if self.signal.aborted:
            assert self.signal.code is not None
            raise AttemptAborted(self.signal.code, self.signal.reason)

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``, but raise ``AttemptAborted`` as soon as the attempt stops."""
        if self.signal.event.wait(seconds):
            self.check()


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "ujobs_current_job", default=None
)


def work_starts() -> None:
    """Called by a body whose definition has ``work_starts_late``, just before its real work
    (after a framework's prologue): a first delivery's start is recorded from now on, so a
    worker that dies before this call hands the job back uncounted, and one that dies after it
    is charged the attempt. Does nothing outside a worker's body, for a body whose start was
    recorded as it began, or when called again; never raises."""
    ctx = _current.get()
    if ctx is None or ctx.starting is None:
        return
    with contextlib.suppress(Exception):  # the worker's own bookkeeping: the body runs on
        ctx.starting()


def current_job() -> JobContext:
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("current_job() was called outside a running job body")
    return ctx


# The node name of the worker running in this process (Celery's ``celery@host``): set by the
# worker when it starts (and by a ``--pool processes`` child from its parent), read by bodies
# (celery_compat's ``self.request.hostname``). One per process, as with Celery's workers.
_node_name: list[str] = []


def node_name() -> str | None:
    """The node name of the worker running in this process, if one runs."""
    return _node_name[-1] if _node_name else None


def set_node_name(name: str) -> None:
    """Called by the worker (and a pool child) that runs in this process."""
    _node_name[:] = [name]


def bind(ctx: JobContext | None) -> contextvars.Token[JobContext | None]:
    return _current.set(ctx)


def unbind(token: contextvars.Token[JobContext | None]) -> None:
    _current.reset(token)
