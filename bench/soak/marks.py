"""Execution records: what every body did, written where no database fault can reach it.

Why it exists: the soak asks "did a body run more often than the faults can explain?" and
"did a persisted step run again?", and the database cannot be the witness of its own outages.
So each process (a thread-pool worker, each process-pool child) appends JSON lines to a file
of its own in ``$SOAK_MARKS``: one ``os.write`` per record on an ``O_APPEND`` descriptor, so a
SIGKILL can cut at most the line being written (the reader skips a torn last line), and
records outlive the process. An *execution* is one call of a body: ``start`` is its first
line (before any work), ``end`` its last (``ok``, ``raised`` for a planned failure or retry,
``aborted`` when the worker stopped it); both carry the same ``exec`` id, and ``start`` the claim's ``attempt`` and ``deliveries``
(counted by each claim, never given back). A step's function
writes ``step`` as its first line. ``raised`` and ``retry`` (Celery's ``self.retry``) are
planned: the soak chose to fail that call.

What it is not: a result store. Whether a job is done is read from the database; these
records only say what ran, where (``pid``, and ``ppid``: the worker of a pool child) and when.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ujobs_bridge._internal.jobs.context import JobContext

ENV = "SOAK_MARKS"

_lock = threading.Lock()
_fd: list[int] = []  # [fd] for the process that opened it
_owner: list[int] = []  # the pid that opened _fd (a forked child opens its own)


def _descriptor() -> int:
    pid = os.getpid()
    with _lock:
        if not _fd or _owner[0] != pid:
            folder = Path(os.environ[ENV])
            path = folder / f"{pid}-{uuid.uuid4().hex[:8]}.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _fd[:] = [fd]
            _owner[:] = [pid]
        return _fd[0]


def record(kind: str, **fields: Any) -> None:
    line = {"k": kind, "t": time.time(), "pid": os.getpid(), "ppid": os.getppid(), **fields}
    os.write(_descriptor(), (json.dumps(line, separators=(",", ":")) + "\n").encode())


@contextlib.contextmanager
def execution(workload: str, ctx: JobContext, **fields: Any) -> Iterator[str]:
    """Brackets one body call: ``start`` now, ``end`` with how it left. The body raises
    ``Planned`` or ``PlannedPoison`` for a planned failure; anything else leaving it is
    recorded by its class name (``AttemptAborted`` when the worker stopped it)."""
    exec_id = uuid.uuid4().hex
    job_id = str(ctx.id)
    record(
        "start",
        w=workload,
        job=job_id,
        exec=exec_id,
        attempt=ctx.attempt,
        deliveries=ctx.deliveries,
        **fields,
    )
    try:
        yield exec_id
    except (Planned, PlannedPoison):
        record("end", job=job_id, exec=exec_id, how="raised")
        raise
    except BaseException as exc:
        how = "retry" if type(exc).__name__ == "Retry" else type(exc).__name__
        record("end", job=job_id, exec=exec_id, how=how)
        raise
    record("end", job=job_id, exec=exec_id, how="ok")


class Planned(Exception):
    """A failure the soak planned (the job retries it)."""


class PlannedPoison(Exception):
    """A failure the soak planned to dead-letter."""


def read(folder: Path) -> list[dict[str, Any]]:
    """Every record of every process, in no particular order; a torn last line is skipped."""
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out
