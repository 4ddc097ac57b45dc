"""What the machine was when a run measured it: cores, Python speed, fsync time, load, commit.

Why it exists: a figure from one machine means little on another. A committed run (the JSON
under ``docs/bench/``) carries the facts a reader needs to judge it: how many cores, how fast
this Python interprets a fixed loop, how long one ``fdatasync`` of a small write takes on the
disk beside the bench's files (what a durable commit waits for), whether other processes were
loading the machine (its load average against its cores, at the start and at the end), and
which commit of the project ran.

What it is not: a benchmark of its own (each probe takes a fraction of a second) nor portable
beyond Linux: a fact that cannot be read is recorded as null.
"""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .cells import median
from .settings import CORES, PROJECT_ROOT

LOOP_ITERATIONS = 2_000_000
FSYNC_WRITES = 50


def python_loop_rate() -> float:
    """Iterations per second of a fixed pure-Python loop (best of three): the Python speed."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for i in range(LOOP_ITERATIONS):
            total += i & 7
        best = min(best, time.perf_counter() - t0)
    return LOOP_ITERATIONS / best


def fdatasync_ms(directory: Path | None = None) -> float:
    """Median milliseconds of one 4 KiB write plus ``fdatasync`` in ``directory`` (a temp dir)."""
    sync = getattr(os, "fdatasync", os.fsync)
    block = b"\0" * 4096
    times = []
    with tempfile.TemporaryFile(dir=directory) as handle:
        fd = handle.fileno()
        for _ in range(FSYNC_WRITES):
            os.pwrite(fd, block, 0)
            t0 = time.perf_counter()
            sync(fd)
            times.append((time.perf_counter() - t0) * 1000.0)
    return median(times)


def load_average() -> float | None:
    """The one-minute load average (None where the OS does not say)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def commit() -> str | None:
    """The project's commit (with ``-dirty`` when the work tree has changes), None outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def loaded(load: float | None) -> bool | None:
    """Whether other work loaded the machine: a load average of half its cores or more."""
    return None if load is None else load >= CORES / 2


def facts_at_start() -> dict[str, Any]:
    """Measured before the first cell, while the bench's own processes are not yet running."""
    load = load_average()
    return {
        "cores": CORES,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "python_loop_iterations_per_s": round(python_loop_rate()),
        "fdatasync_4k_ms": round(fdatasync_ms(), 3),
        "load_average_1m_start": load,
        "loaded_by_others": loaded(load),
        "commit": commit(),
    }
