"""Time limits of a body in a ``--pool processes`` child, kept as Celery's prefork pool keeps
them: the parent watches the clock, signals the child's main thread at the soft limit and kills
the child at the hard one.

Why it exists: an exception raised into a thread from outside (``PyThreadState_SetAsyncExc``)
lands only when that thread next runs Python code, so a body blocked in ``time.sleep`` or a
socket read escaped both limits until the call returned. In a pool child the body runs in the
main thread, and a signal reaches the main thread inside such a call: the call is interrupted
and the handler raises the soft limit's exception there, as billiard's ``SIGUSR1`` does. Only
killing the process stops a body whatever it does (a C call that never looks at signals, a
``finally`` that blocks), so the hard limit is the parent's ``SIGKILL``, as in Celery.

The child side (``keep``): a body that has limits says so before it starts (a note on the
child's pipe: ``("limits", soft_s, hard_s)``) and that they are over when it ends (``("limits",
None, None)``); a ``SIGUSR1`` handler installed once per child raises the soft limit's exception
while a body is armed, and does nothing otherwise (a signal that arrives as the body ends).
The parent side (``Watch``): the keeper of the child records the notes, sends ``SIGUSR1`` at
the soft deadline and kills the child at the hard one; the attempt then fails as the job's
definition says (``JobDefinition.on_time_limit``: for a Celery task, FAILURE with
``TimeLimitExceeded``, recorded in the worker as Celery's main process records it).

What it is not: the thread pool's limits (a body thread cannot be interrupted inside a blocking
call: celery_compat raises into it between bytecodes, a job polls its signal), nor the engine's
``timeout=`` (the worker's deadline, ``stopping.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

NOTE = "limits"  # the first item of a child's note about its body's limits
SOFT_SIGNAL = signal.SIGUSR1  # billiard's SIG_SOFT_TIMEOUT

# This process's pipe to its parent, when it is a pool child (``attach``), and the exception
# the soft limit raises while a body is armed. One pool child runs one body at a time, in its
# main thread; both are per process, as the child's registry is.
_pipe: list[Connection] = []
_soft_error: list[Callable[[], BaseException]] = []


def attach(conn: Connection) -> None:
    """Called once by a pool child (``child.py``): its bodies' limits are the pool's from now
    on, noted on ``conn``; the soft limit's signal is handled (ignored while no body is armed)."""
    _pipe[:] = [conn]
    signal.signal(SOFT_SIGNAL, _on_soft_signal)


def _on_soft_signal(signum: int, frame: FrameType | None) -> None:
    if _soft_error:
        make = _soft_error.pop()
        raise make()


def pipe() -> Connection | None:
    """This pool child's pipe to its keeper (None outside a pool child)."""
    return _pipe[0] if _pipe else None


def kept_by_pool() -> bool:
    """True in a pool child's main thread, where a body's limits are kept by the pool."""
    return bool(_pipe) and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def keep(
    soft_s: float | None, hard_s: float | None, soft_error: Callable[[], BaseException]
) -> Iterator[None]:
    """Around a body in a pool child's main thread: the parent signals ``soft_error()`` into it
    at ``soft_s`` seconds and kills this child at ``hard_s`` (either may be None)."""
    soft = float(soft_s) if soft_s else None
    hard = float(hard_s) if hard_s else None
    if not _pipe or (soft is None and hard is None):
        yield
        return
    if soft is not None:
        _soft_error[:] = [soft_error]
    try:
        _pipe[0].send((NOTE, soft, hard))
        yield
    finally:
        _soft_error.clear()  # first: a signal from now on finds nothing armed
        _pipe[0].send((NOTE, None, None))


def is_note(message: Any) -> bool:
    return isinstance(message, tuple) and len(message) == 3 and message[0] == NOTE


class HardLimitPassed(Exception):
    """The body ran past its hard time limit; the parent killed its child."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(f"the body ran past its {limit_s:g}s time limit; its child was killed")
        self.limit_s = limit_s


@dataclass(slots=True)
class Watch:
    """The parent's view of the limits of the body a child runs now (monotonic deadlines)."""

    soft_at: float | None = None
    hard_at: float | None = None
    hard_s: float = 0.0

    def note(self, message: tuple[Any, ...], now: float) -> None:
        _, soft_s, hard_s = message
        self.soft_at = None if soft_s is None else now + float(soft_s)
        self.hard_at = None if hard_s is None else now + float(hard_s)
        self.hard_s = float(hard_s or 0.0)

    def next_at(self) -> float | None:
        times = [t for t in (self.soft_at, self.hard_at) if t is not None]
        return min(times) if times else None

    def due(self, now: float, pid: int | None, kill: Callable[[], None]) -> None:
        """Signal the soft limit, or kill at the hard one (``HardLimitPassed``), when due."""
        if self.hard_at is not None and now >= self.hard_at:
            kill()
            raise HardLimitPassed(self.hard_s)
        if self.soft_at is not None and now >= self.soft_at:
            self.soft_at = None
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, SOFT_SIGNAL)


__all__ = ["HardLimitPassed", "Watch", "attach", "is_note", "keep", "kept_by_pool"]
