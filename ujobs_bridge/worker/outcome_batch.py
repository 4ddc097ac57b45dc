"""The outcomes a worker owes the database, batched: one statement writes many attempts' ends.

Why it exists: one commit per finished job is the floor Celery-speed Postgres queues hit; writing
outcomes in batches (flushed when half the worker's capacity is waiting, when the oldest has
waited ``ack_interval``, or when the worker goes idle) is where the headroom is. Each outcome
carries its attempt's lease token, so a write whose lease was lost changes nothing, and an
outcome whose write failed is kept and written again (a repeat is fenced if the first landed).

What it is not: the decision of what the outcome is (``attempt.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from uuid import UUID

from ..records import JobState, Settlement

log = logging.getLogger("ujobs.worker")


@dataclass(slots=True)
class WorkerCounts:
    claimed: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    handed_back: int = 0
    fenced: int = 0
    rescued: int = 0


class OutcomeBatch:
    def __init__(self, *, threshold: int, interval_s: float) -> None:
        self.threshold = max(1, threshold)
        self.interval_s = interval_s
        self.counts = WorkerCounts()
        self._lock = threading.Lock()
        self._pending: list[Settlement] = []
        self._since = 0.0

    def add(self, settlement: Settlement) -> None:
        with self._lock:
            if not self._pending:
                self._since = time.monotonic()
            self._pending.append(settlement)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def take_due(self, *, force: bool = False, idle: bool = False) -> list[Settlement]:
        """The batch to write now, or nothing if it is better to wait for more."""
        with self._lock:
            if not self._pending:
                return []
            due = (
                force
                or idle
                or len(self._pending) >= self.threshold
                or time.monotonic() - self._since >= self.interval_s
            )
            if not due:
                return []
            batch, self._pending = self._pending, []
            return batch

    def restore(self, batch: list[Settlement]) -> None:
        """Keep outcomes whose write failed, ahead of newer ones."""
        if batch:
            with self._lock:
                self._pending = batch + self._pending

    def written(self, batch: list[Settlement], matched: set[UUID]) -> None:
        counts = self.counts
        for s in batch:
            if s.id not in matched:
                counts.fenced += 1
                log.warning(
                    "ujobs.worker.fenced: job %s: the lease was gone, the write changed nothing",
                    s.id,
                )
            elif s.uncount:
                counts.handed_back += 1
            elif s.state is JobState.DONE:
                counts.done += 1
            elif s.state is JobState.READY:
                counts.retried += 1
            elif s.state is JobState.DEAD:
                counts.dead += 1
            else:
                counts.cancelled += 1
