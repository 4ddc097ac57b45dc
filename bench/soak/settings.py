"""The parameters of one soak run: how long, how hard, which seed, and where Redis is.

Why it exists: the fault plan, the producers, the fleet and the verdict must agree on the same
numbers (lease length, tick period, rates), and a run must be reproducible from its seed. The
``--small`` profile is the one ``tests/test_soak.py`` runs: the same topology and every fault
kind, fewer faults, a shorter run.

The workers run with a small prefetch (``--prefetch-multiplier``) so that ``sigkill-full`` can
fill every slot and every prefetched place of one worker quickly, and a small
``--max-result-bytes`` so that an oversize result costs little to build.

What it is not: argument parsing (``__main__``). Redis can be moved with ``SOAK_REDIS_URL``
(default db 8, the soak's own; only keys carrying the run id are ever written or deleted).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REDIS_URL = os.environ.get("SOAK_REDIS_URL", "redis://127.0.0.1:6379/8")

KINDS = (
    "sigkill",
    "sigkill-full",  # SIGKILL a worker holding as many jobs as it may: every slot and prefetch
    "sigstop",
    "terminate",
    "restart-fast",
    "restart-immediate",
    "restart-long",  # -m immediate, down longer than the lease
)
PREFETCH_MULTIPLIER = 2  # the workers hold 2 x concurrency jobs at most (running + prefetched)
MAX_RESULT_BYTES = 256 * 1024  # the workers' --max-result-bytes


@dataclass(frozen=True)
class Rates:
    """Sends per second of each producer."""

    plain: float = 6.0
    steps: float = 2.0
    celery: float = 4.0
    migrated: float = 3.0


@dataclass(frozen=True)
class SoakSettings:
    duration_s: float = 600.0
    seed: int = 1
    min_each: int = 5  # every fault kind at least this many times
    settle_s: float = 180.0  # after faults stop: the deadline for everything to finish
    lease_s: float = 10.0  # workers' --lease
    warmup_s: float = 15.0  # no fault before this
    tail_s: float = 15.0  # no fault after duration - tail
    rates: Rates = field(default_factory=Rates)
    log_dir: Path | None = None  # None: a temporary folder, removed unless the run fails
    json_out: Path | None = None
    redis_url: str = REDIS_URL
    run_id: str = field(default_factory=lambda: f"{os.getpid()}_{uuid.uuid4().hex[:6]}")

    @classmethod
    def small(cls, duration_s: float = 75.0, seed: int = 1) -> SoakSettings:
        """The CI profile: every kind once, a short run, a generous settle."""
        return cls(
            duration_s=duration_s,
            seed=seed,
            min_each=1,
            settle_s=120.0,
            lease_s=4.0,  # short, so an outage longer than the lease stays short
            warmup_s=8.0,
            tail_s=8.0,
            rates=Rates(plain=4.0, steps=1.5, celery=3.0, migrated=2.0),
        )

    @property
    def migrated_queue(self) -> str:
        """The Redis queue real Celery publishes to and migrate drains (private to the run)."""
        return f"soak_migrated_{self.run_id}"

    @property
    def drainer_id(self) -> str:
        return f"soak-{self.run_id}"


def private_queue(worker: str) -> str:
    """The queue only ``worker`` consumes (besides its workload's): ``sigkill-full`` fills it, and
    the slot probe at the end runs there."""
    return f"soak_w_{worker}"
