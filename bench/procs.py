"""Worker subprocesses in their own process groups, their RSS, and waits that always end.

Why it exists: a benchmark that leaves a Celery worker or a consumer loop running after a crash
poisons the next run (and the machine). Every process the bench starts goes through ``spawn``:
it gets its own session/process group, its output goes to a log file (never a pipe that could
fill up and stall it), and it is registered so that ``stop_all`` kills every group on the way out,
whatever happened. RSS is summed over each worker's whole process group (Celery's prefork
children included), sampled on a thread while a drain runs. ``wait_until`` is the only way the
bench waits for anything, and it always has a deadline.

What it is not: a process supervisor. Nothing is restarted; a worker that dies fails its cell.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psutil

T = TypeVar("T")
MIB = 1024 * 1024


class BenchTimeout(RuntimeError):
    """A wait ran past its deadline."""


class WorkerDied(RuntimeError):
    """A worker process exited while the bench still needed it."""


@dataclass
class Group:
    """One spawned process and everything it forks (its process group)."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pgid(self) -> int:
        return self.popen.pid  # start_new_session=True: the child leads its own group

    def exited(self) -> int | None:
        return self.popen.poll()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the group, wait up to ``grace_s``, then SIGKILL whatever is left of it."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signal.SIGKILL)  # children that outlived their leader
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace_s)
        _live.pop(self.pgid, None)


_live: dict[int, Group] = {}
_live_lock = threading.Lock()


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Group:
    """Start ``argv`` in a new session; stdout and stderr go to ``log_dir/<name>-<n>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{time.time_ns()}.log"
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    group = Group(name, popen, log_path)
    with _live_lock:
        _live[group.pgid] = group
    return group


def stop_all(grace_s: float = 5.0) -> None:
    """Kill every group this process spawned and has not stopped yet."""
    with _live_lock:
        groups = list(_live.values())
    for group in groups:
        group.stop(grace_s)


def check_alive(groups: Sequence[Group]) -> None:
    for group in groups:
        code = group.exited()
        if code is not None:
            raise WorkerDied(
                f"{group.name} exited with code {code}; last lines of {group.log_path}:\n"
                f"{group.log_tail()}"
            )


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.02,
    watch: Sequence[Group] = (),
) -> T:
    """Call ``probe`` every ``interval_s`` until it returns something other than None/False.

    Raises ``BenchTimeout`` after ``timeout_s`` and ``WorkerDied`` as soon as a watched group exits.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        check_alive(watch)
        if time.monotonic() >= deadline:
            raise BenchTimeout(f"gave up after {timeout_s:.1f}s waiting for {what}")
        time.sleep(interval_s)


def group_rss(pgids: Sequence[int]) -> int:
    """Bytes of RSS summed over every live process whose process group is in ``pgids``.

    Shared pages (a prefork child's copy-on-write pages, the interpreter's text) are counted once
    per process, as ``ps`` would; this over-counts forked pools, which is how they are usually
    judged in production too.
    """
    wanted = set(pgids)
    total = 0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) in wanted:
                total += proc.memory_info().rss
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied, PermissionError):
            continue
    return total


@dataclass
class RssSampler:
    """Samples ``group_rss`` every ``interval_s`` on a daemon thread until ``stop()``."""

    pgids: Sequence[int]
    interval_s: float = 0.05
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> RssSampler:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> int:
        value = group_rss(self.pgids)
        with self._lock:
            self.samples.append(value)
        return value

    @property
    def peak(self) -> int:
        with self._lock:
            return max(self.samples, default=0)
