"""The worker's events on/off switch: ONE runtime setting, seen by the worker and its pool children.

Why it exists: Celery's ``-E`` / ``worker_send_task_events`` start a worker with task events on,
and the remote commands ``enable_events`` / ``disable_events`` flip them while it runs. The
bridge worker runs task bodies in its own process (``--pool threads``) or in pool children
(``--pool processes``), which emit the task events themselves, so a flip in the main process must
reach the children at once. The switch is therefore one byte in a small memory-mapped file that
the main process creates (``share``) and each child maps (``attach``, by the path the worker
leaves in the environment); reading it costs one memory read on the hot path. Outside a worker
(or before ``share``) it is a plain process-local flag.

The functions a remote-control command calls, in the worker's main process::

    from celery_compat.events import switch as event_switch
    event_switch.set_enabled(True)    # enable_events
    event_switch.set_enabled(False)   # disable_events
    event_switch.enabled()            # what `inspect` may report

As in Celery, the switch governs task events; worker events (online, heartbeat, offline) are sent
by a worker once its events were ever on, so a worker whose task events are turned off does not
look dead to a monitor.

What it is not: the emitter (``event_emitter.py``) or the decision of what an event holds
(``task_events.py``).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
import threading

ENV_SWITCH = "UJOBS_CELERY_EVENTS_SWITCH"  # the mapped file's path, for pool children

_lock = threading.Lock()
_local = [False]
_mapped: list[mmap.mmap] = []
_owned: list[str] = []  # the file this process created (removed by ``release``)


def enabled() -> bool:
    """Are task events on (in this worker, main process or pool child)?"""
    if _mapped:
        return _mapped[0][0] == 1
    return _local[0]


def set_enabled(on: bool) -> None:
    """Turn task events on or off for this worker and its pool children, from now on."""
    with _lock:
        _local[0] = bool(on)
        if _mapped:
            _mapped[0][0] = 1 if on else 0


def share(on: bool) -> str:
    """In the worker's main process, before pool children start: create the shared byte set to
    ``on`` and leave its path in the environment; returns the path."""
    with _lock:
        if _owned:
            path = _owned[0]
        else:
            fd, path = tempfile.mkstemp(prefix="ujobs-events-", suffix=".switch")
            with os.fdopen(fd, "wb") as out:
                out.write(b"\0")
            _owned.append(path)
            _map(path)
        _local[0] = bool(on)
        _mapped[0][0] = 1 if on else 0
        os.environ[ENV_SWITCH] = path
        return path


def attach() -> bool:
    """In a pool child: map the byte the main process shared; False when there is none (the
    flag stays process-local)."""
    path = os.environ.get(ENV_SWITCH)
    if not path:
        return False
    with _lock:
        if _mapped:
            return True
        try:
            _map(path)
        except OSError:
            return False
        return True


def _map(path: str) -> None:
    with open(path, "r+b") as f:
        _mapped.append(mmap.mmap(f.fileno(), 1))


def release() -> None:
    """Forget the shared byte (the flag keeps its last value) and remove the file this process
    created. Idempotent."""
    with _lock:
        if _mapped:
            _local[0] = _mapped[0][0] == 1
            with contextlib.suppress(BufferError, ValueError):
                _mapped.pop().close()
        while _owned:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_owned.pop())
        if os.environ.get(ENV_SWITCH):
            os.environ.pop(ENV_SWITCH, None)
