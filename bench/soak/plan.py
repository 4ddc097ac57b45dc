"""The seeded fault schedule: which fault, when, against which process, for how long.

Why it exists: a chaos run that cannot be replayed cannot be debugged, and a short run that
happens to draw no ``restart -m immediate`` proves nothing about it. So the plan is a pure
function of the seed and the settings: every kind appears at least ``min_each`` times, in a
seeded order, spread evenly (with seeded jitter) between the warm-up and the quiet tail, each
with its seeded target (worker faults go round every worker) and duration (``restart-long``: 1.3 to
2 leases of downtime; the other restarts under 2 s). The same seed gives the same plan on any
machine; what the machine does with it (how long a restart takes) is measured, not planned.

What it is not: the injector (``faults``), which carries the plan out and records what happened.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from .settings import KINDS, SoakSettings


@dataclass(frozen=True)
class Fault:
    at_s: float  # offset from the start of the run
    kind: str  # one of settings.KINDS
    target: int  # index into the worker slots (sigkill, sigkill-full, sigstop); unused otherwise
    hold_s: float  # sigstop: how long stopped; restarts: downtime between stop and start
    share: float  # terminate: the share of the database's backends terminated


def _cycle(rng: random.Random, n: int) -> Iterator[int]:
    order = list(range(n))
    rng.shuffle(order)
    return itertools.cycle(order)


def plan(settings: SoakSettings, workers: int) -> list[Fault]:
    rng = random.Random(settings.seed)
    kinds = [k for k in KINDS for _ in range(settings.min_each)]
    rng.shuffle(kinds)
    start, end = settings.warmup_s, settings.duration_s - settings.tail_s
    if end <= start:
        raise ValueError(
            f"--duration {settings.duration_s:g}s leaves no room for faults after a "
            f"{settings.warmup_s:g}s warm-up and before a {settings.tail_s:g}s quiet tail"
        )
    gap = (end - start) / len(kinds)
    # Worker faults go round the workers in a seeded order, so every pool kind gets hit.
    rounds = {k: _cycle(rng, workers) for k in ("sigkill", "sigkill-full", "sigstop")}
    out: list[Fault] = []
    for i, kind in enumerate(kinds):
        at = start + gap * i + rng.uniform(0.0, gap * 0.4)
        if kind == "sigstop":
            # Mostly shorter than the lease (the heartbeat resumes in time), sometimes longer
            # (the lease runs out, another worker rescues, the fenced write changes nothing).
            hold = rng.uniform(1.0, settings.lease_s * 1.6)
        elif kind == "restart-long":
            # Longer than the lease: no lease may run out while the database is down.
            hold = rng.uniform(settings.lease_s * 1.3, settings.lease_s * 2.0)
        elif kind.startswith("restart"):
            hold = rng.uniform(0.0, 2.0)
        else:
            hold = 0.0
        out.append(
            Fault(
                at_s=round(at, 2),
                kind=kind,
                target=next(rounds[kind]) if kind in rounds else 0,
                hold_s=round(hold, 2),
                share=round(rng.uniform(0.3, 1.0), 2),
            )
        )
    return out
