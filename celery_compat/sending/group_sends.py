"""A Celery group's sends, gathered: written together, a commit per chunk, never held for long.

Why it exists: Celery publishes each member of a group as a broker message of its own; on
Postgres each would be a commit of its own, so a group of 1,000 waited out 1,000 WAL flushes.
Inside a group's producer block (``BridgeApp.producer_or_acquire``), the sends made outside any
caller transaction are held and written together, through the pool:

- when the block exits, so every row exists when ``apply_async`` returns;
- every ``CHUNK`` messages, so a huge group holds bounded memory;
- at the latest ``MAX_HOLD_S`` after the first held message, by a timer, so a generator header
  that takes its time is still sent as it is consumed (celery #3021: its first parts run while
  the generator is still yielding);
- before this thread reads a result (``flush``), so code running inside the send sees its sends.

A chunk the timer could not write (an outage) is written again when the block exits, and an
error then reaches the caller: nothing is dropped silently. A block that raises drops what it
still holds (what was written stays written, as a broker keeps what was published before).

What it is not: ``transaction.enqueue_in`` (the caller's own transaction: a group sent inside
it rides that transaction and commits with it).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery_compat.sending.transaction import Held

CHUNK = 1000  # messages per commit at most
MAX_HOLD_S = 0.1  # the longest a held message waits for its commit


class _Gathering:
    def __init__(self, write: Callable[[list[Held]], None]) -> None:
        self.write = write
        self.lock = threading.Condition()
        self.held: list[Held] = []
        self.failed: list[Held] = []  # taken by a timer whose write failed: retried at exit
        self.writing = 0  # timer writes in flight
        self.timers: list[threading.Timer] = []

    def hold(self, item: Held) -> None:
        with self.lock:
            self.held.append(item)
            first, full = len(self.held) == 1, len(self.held) >= CHUNK
        if full:
            self.flush()
        elif first:
            self.timers = [t for t in self.timers if t.is_alive()]
            timer = threading.Timer(MAX_HOLD_S, self._flush_late)
            timer.daemon = True
            self.timers.append(timer)
            timer.start()

    def _take(self) -> list[Held]:
        with self.lock:
            chunk, self.held = self.held, []
        return chunk

    def flush(self) -> None:
        """Write what is held now, and wait for a timer's write in flight (the sender's thread)."""
        chunk = self._take()
        if chunk:
            self.write(chunk)
        with self.lock:
            self.lock.wait_for(lambda: self.writing == 0)

    def _flush_late(self) -> None:
        with self.lock:
            chunk, self.held = self.held, []
            if not chunk:
                return
            self.writing += 1
        try:
            self.write(chunk)
        except BaseException:  # kept for the exit, which writes it again or raises
            with self.lock:
                self.failed.extend(chunk)
        finally:
            with self.lock:
                self.writing -= 1
                self.lock.notify_all()

    def finish(self, *, write: bool) -> None:
        for timer in self.timers:
            timer.cancel()
        for timer in self.timers:
            timer.join()
        if not write:
            return
        with self.lock:
            chunk, self.failed, self.held = self.failed + self.held, [], []
        if chunk:
            self.write(chunk)


_current: contextvars.ContextVar[_Gathering | None] = contextvars.ContextVar(
    "celery_compat_group_sends", default=None
)


@contextmanager
def gathered(write: Callable[[list[Held]], None]) -> Iterator[None]:
    """Gather this block's sends (see the module's docstring); nested blocks join the outer."""
    if _current.get() is not None:
        yield
        return
    gathering = _Gathering(write)
    token = _current.set(gathering)
    ok = False
    try:
        yield
        ok = True
    finally:
        _current.reset(token)
        gathering.finish(write=ok)


def hold(message: Any, payload: str, max_attempts: int, key: Any = None) -> bool:
    """Hold ``message`` for the enclosing ``gathered`` block; False if there is none."""
    gathering = _current.get()
    if gathering is None:
        return False
    gathering.hold((message, payload, max_attempts, key))
    return True


def flush() -> None:
    """Before this thread reads a result: write what its ``gathered`` block holds."""
    gathering = _current.get()
    if gathering is not None:
        gathering.flush()
