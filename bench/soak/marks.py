"""Execution records: what every body did, written where no database fault can reach it.

Why it exists: the soak asks "did a body run more often than the faults can explain?" and
"did a persisted step run again?", and the database cannot be the witness of its own outages.
So each process (a thread-pool worker, each process-pool child) appends JSON lines to a file
of its own in ``$SOAK_MARKS``: one ``os.write`` per record on an ``O_APPEND`` descriptor, so a
SIGKILL can cut at most the line being written (the reader skips a torn last line), and
records outlive the process. An *execution* is one call of a body: ``start`` is its first
line (before any work), ``end`` its last (``ok`` when it returned, ``raised`` for a planned
failure or retry, ``oversize`` when it returned a result over the workers' limit on purpose,
else the class of what left it, ``AttemptAborted`` when the worker stopped it); both carry the
same ``exec`` id, and ``start`` the claim's ``attempt`` and ``deliveries`` (counted by each
claim, never given back), and ``hang`` when the body is about to block past its timeout on
purpose (a process pool kills its child then: no ``end``). A step's function writes ``step`` as
its first line. ``raised``, ``retry`` (Celery's ``self.retry``) and ``oversize`` are planned:
the soak chose to fail that call.

``probe`` is the slot probe's body (run at the end, ``concurrency`` of them on one worker's own
queue): each leaves a file in ``probes/<worker>/`` while it runs and waits until it sees as many
files as the worker has slots (or ``PROBE_WAIT_S``), then records how many it saw: the most any
probe saw is how many bodies the worker ran at once, its live slots.

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
PROBE_WAIT_S = 8.0
PROBE_POLL_S = 0.05

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


class Run:
    """One execution as the body sees it: ``how`` it will be recorded if it returns (``ok``;
    ``oversize`` when it returns an oversize result on purpose)."""

    def __init__(self, exec_id: str) -> None:
        self.exec_id = exec_id
        self.how = "ok"


@contextlib.contextmanager
def execution(workload: str, ctx: JobContext, **fields: Any) -> Iterator[Run]:
    """Brackets one body call: ``start`` now, ``end`` with how it left. The body raises
    ``Planned`` or ``PlannedPoison`` for a planned failure; anything else leaving it is
    recorded by its class name (``AttemptAborted`` when the worker stopped it)."""
    run = Run(uuid.uuid4().hex)
    job_id = str(ctx.id)
    record(
        "start",
        w=workload,
        job=job_id,
        exec=run.exec_id,
        attempt=ctx.attempt,
        deliveries=ctx.deliveries,
        **fields,
    )
    try:
        yield run
    except (Planned, PlannedPoison):
        record("end", job=job_id, exec=run.exec_id, how="raised")
        raise
    except BaseException as exc:
        how = "retry" if type(exc).__name__ == "Retry" else type(exc).__name__
        record("end", job=job_id, exec=run.exec_id, how=how)
        raise
    record("end", job=job_id, exec=run.exec_id, how=run.how)


def probe(worker: str, expect: int) -> int:
    """The slot probe's body (see the module's docstring): how many probes of ``worker`` ran at
    once with this one, at most ``expect``; recorded as ``probe``."""
    folder = Path(os.environ[ENV]) / "probes" / worker
    full = folder.with_suffix(".full")  # one probe saw them all: the others stop waiting too
    folder.mkdir(parents=True, exist_ok=True)
    mine = folder / f"{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}"
    mine.touch()
    try:
        deadline = time.monotonic() + PROBE_WAIT_S
        seen = len(list(folder.iterdir()))
        while seen < expect and not full.exists() and time.monotonic() < deadline:
            time.sleep(PROBE_POLL_S)
            seen = max(seen, len(list(folder.iterdir())))
        if seen >= expect:
            full.touch()
    finally:
        mine.unlink(missing_ok=True)
    record("probe", worker=worker, seen=seen)
    return seen


class Planned(Exception):
    """A failure the soak planned (the job retries it)."""


class PlannedPoison(Exception):
    """A failure the soak planned to dead-letter."""


class PlannedHang(Planned):
    """A body that blocked past its timeout (deaf to its signal) says so when it wakes."""


class PlannedUnprintable(Planned):
    """A planned failure that cannot be shown: its ``__str__`` and ``__repr__`` raise."""

    def __str__(self) -> str:
        raise RuntimeError("this exception's __str__ raises on purpose")

    def __repr__(self) -> str:
        raise RuntimeError("this exception's __repr__ raises on purpose")


def read(folder: Path) -> list[dict[str, Any]]:
    """Every record of every process, in no particular order; a torn last line is skipped."""
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out
