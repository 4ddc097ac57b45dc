"""The soak's processes, supervised: started, restarted when they exit, signalled on purpose.

Why it exists: in production a supervisor (systemd, Kubernetes) restarts a worker that died,
so the soak does too: any process that exits (SIGKILLed by the injector, or on its own, as
``migrate --follow`` does when its database goes away) is started again after a short backoff
(0.5 s, doubling up to 5 s while it keeps dying young), and every exit is kept with its code
and whether the soak caused it. A SIGKILL hits the main process only, as a crash or the OOM
killer would: pool children must die with it, and the ones still alive 3 s later are counted
as orphans (then killed). SIGSTOP/SIGCONT hit the whole process group, as a frozen host would.
Every process goes through ``bench.procs.spawn`` (own session, log file, killed on the way out).

What it is not: the fault plan (``plan``) or its timing (``faults``); this only acts when told.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..procs import Group, spawn
from ..settings import PROJECT_ROOT

BACKOFF_S = 0.5
BACKOFF_CAP_S = 5.0
YOUNG_S = 10.0  # a process that dies younger than this backs off longer next time
ORPHAN_WAIT_S = 3.0


@dataclass
class Exit:
    t: float
    code: int
    planned: bool  # the soak killed it
    orphans: int = 0
    retired: bool = False  # the soak stopped it for good (SIGTERM at the end)


@dataclass
class Slot:
    name: str  # also the node name's first part: -n <name>@soak
    kind: str  # "worker" | "scheduler" | "migrate"
    argv: list[str]
    env: dict[str, str]
    group: Group | None = None
    starts: int = 0
    exits: list[Exit] = field(default_factory=list)
    retired: bool = False  # stopped for good: never restarted
    kill_planned: bool = False
    next_start: float = 0.0
    backoff_s: float = BACKOFF_S
    started_at: float = 0.0
    pids: list[int] = field(default_factory=list)  # every main pid it ever had

    @property
    def pid(self) -> int | None:
        group = self.group
        return group.popen.pid if group is not None and group.exited() is None else None

    @property
    def node(self) -> str:
        return f"{self.name}@soak"


class Fleet:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.slots: list[Slot] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reaping: list[tuple[float, Group, Exit]] = []

    def add(self, slot: Slot) -> Slot:
        self.slots.append(slot)
        return slot

    def of_kind(self, kind: str) -> list[Slot]:
        return [s for s in self.slots if s.kind == kind]

    # ------------------------------------------------------------------ supervision

    def start(self) -> None:
        with self._lock:
            for slot in self.slots:
                self._spawn(slot)
        self._thread = threading.Thread(target=self._supervise, name="soak-fleet", daemon=True)
        self._thread.start()

    def _spawn(self, slot: Slot) -> None:
        env = {"PYTHONPATH": str(PROJECT_ROOT), **slot.env}
        slot.group = spawn(slot.name, slot.argv, log_dir=self.log_dir, env=env, cwd=PROJECT_ROOT)
        slot.starts += 1
        slot.started_at = time.monotonic()
        slot.pids.append(slot.group.popen.pid)

    def _supervise(self) -> None:
        while not self._stop.wait(0.25):
            with self._lock:
                now = time.monotonic()
                for slot in self.slots:
                    self._check(slot, now)
                self._reap(now)

    def _check(self, slot: Slot, now: float) -> None:
        group = slot.group
        if group is not None:
            code = group.exited()
            if code is None:
                return
            gone = Exit(time.time(), code, planned=slot.kill_planned, retired=slot.retired)
            slot.exits.append(gone)
            slot.kill_planned = False
            slot.group = None
            self._reaping.append((now + ORPHAN_WAIT_S, group, gone))
            young = now - slot.started_at < YOUNG_S
            slot.backoff_s = min(BACKOFF_CAP_S, slot.backoff_s * 2) if young else BACKOFF_S
            slot.next_start = now + slot.backoff_s
        if slot.group is None and not slot.retired and now >= slot.next_start:
            self._spawn(slot)

    def _reap(self, now: float) -> None:
        """Groups whose leader exited a while ago: count what is left of them, then kill it."""
        due = [r for r in self._reaping if r[0] <= now]
        self._reaping = [r for r in self._reaping if r[0] > now]
        for _, group, gone in due:
            gone.orphans = _alive_in_group(group.pgid)
            group.stop(grace_s=1.0)

    # ------------------------------------------------------------------ faults

    def kill(self, slot: Slot) -> int | None:
        """SIGKILL the main process (not its children); the supervisor restarts it."""
        with self._lock:
            pid = slot.pid
            if pid is None:
                return None
            slot.kill_planned = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            return pid

    def pause(self, slot: Slot) -> int | None:
        with self._lock:
            pid = slot.pid
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGSTOP)
            return pid

    def resume(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGCONT)

    # ------------------------------------------------------------------ the end

    def retire(self, slots: list[Slot], grace_s: float = 30.0) -> dict[str, int | None]:
        """SIGTERM ``slots`` (never restarted again) and wait; their exit codes (``None``: not
        running then, or still running at the deadline, and killed)."""
        groups: dict[str, Group | None] = {}
        with self._lock:
            for slot in slots:
                slot.retired = True
                groups[slot.name] = slot.group
                if slot.group is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(slot.group.popen.pid, signal.SIGTERM)
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + grace_s
        for name, group in groups.items():
            codes[name] = None
            if group is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                codes[name] = group.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            group.stop(grace_s=1.0)
        return codes

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            for slot in self.slots:
                slot.retired = True
                if slot.group is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(slot.group.pgid, signal.SIGCONT)
                    slot.group.stop(grace_s=5.0)
            for _, group, _gone in self._reaping:
                group.stop(grace_s=1.0)
            self._reaping = []


def _alive_in_group(pgid: int) -> int:
    count = 0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                count += 1
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied, PermissionError):
            continue
    return count
