"""The machine's CPU spent while a drain runs: what one job or message costs the whole machine.

Why it exists: a rate ratio against Celery says how much faster a drain was, not whether the
machine had room for it to be faster. The busy CPU-seconds of every process on the machine (the
drainer or worker, Postgres, the broker) between the spawn and the last job, divided by the jobs,
is what a job costs the machine; ``cores`` divided by that is the rate at which the drain would
fill every core. Two drains' costs side by side bound their rate ratio on a machine that both
fill: a target above the ratio of the costs cannot be met by running faster, only by spending
less. The broker's own share is read from its process (Redis's pid from ``INFO``, RabbitMQ's
``beam.smp`` found by name), which the bench's local brokers allow.

What it is not: a profiler, or portable: it reads Linux's ``/proc`` and answers NaN where it
cannot (another OS, a broker on another host, a process that is gone).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

PROC = Path("/proc")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/stat's first line: user nice system idle iowait irq softirq steal (guest is in user).
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def machine_busy_s() -> float:
    """CPU-seconds every core of the machine spent busy since boot (NaN off Linux)."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return math.nan
    if not first or first[0] != "cpu":
        return math.nan
    ticks = [int(v) for v in first[1:]]
    return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) / _TICK


def process_cpu_s(pid: int | None) -> float:
    """User plus system CPU-seconds of process ``pid`` and all its threads (NaN if unknown)."""
    if pid is None:
        return math.nan
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return math.nan
    fields = text[text.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    try:
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    except (IndexError, ValueError):
        return math.nan


def find_process(command: str) -> int | None:
    """The pid of the first process whose command name is ``command`` (None if none is)."""
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return None
    for entry in sorted(entries, key=lambda p: p.name):
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == command:
                return int(entry.name)
        except OSError:
            continue
    return None


def per_unit_us(cpu_s: float, units: int) -> float:
    """``cpu_s`` CPU-seconds spread over ``units`` jobs or messages, in microseconds each."""
    if units <= 0 or math.isnan(cpu_s):
        return math.nan
    return cpu_s / units * 1e6
