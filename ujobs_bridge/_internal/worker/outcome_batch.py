"""The outcomes a worker owes the database, batched: one statement writes many attempts' ends.

Why it exists: one commit per finished job is the floor Celery-speed Postgres queues hit; writing
outcomes in batches (flushed when half the worker's capacity is waiting, when the oldest has
waited ``ack_interval``, or when the worker goes idle) is where the headroom is. Each outcome
carries its attempt's lease token, so a write whose lease was lost changes nothing, and an
outcome whose write failed is kept and written again (a repeat is fenced if the first landed).
A batch is bounded by count and by bytes (``max_items``, ``max_bytes``), so a backlog built up
during an outage, or a few large results, never becomes one document too big to store; the
leases of outcomes not written yet are still renewed by the heartbeat (``leases()``), so a
finished job is not rescued from under its result (those of a batch being written are not: its
statement locks their rows, and a renewal would wait for its commit). The heartbeat also learns
when a large batch is being written (``writing_large()``), and renews on a connection of its
own rather than wait for the write.

What it is not: the decision of what the outcome is (``attempt.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from uuid import UUID

from ujobs_bridge.records import JobState, Settlement

log = logging.getLogger("ujobs.worker")

MAX_ITEMS = 1000
MAX_BYTES = 32 * 1024 * 1024
ITEM_OVERHEAD = 160  # id, token, state and the rest of one item of the batch document
LARGE_WRITE = 1024 * 1024  # a batch this large is written too slowly for a renewal to wait


def size_of(s: Settlement) -> int:
    """About how many bytes ``s`` adds to a batch document (characters, not encoded bytes)."""
    return ITEM_OVERHEAD + len(s.output_json or "") + len(s.error or "")


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
    claims: int = 0  # claim passes that asked for work (polls and wake-ups alike)
    empty_claims: int = 0  # of those, the ones that found nothing
    hand_offs: int = 0  # jobs an insert claimed for this worker and it ran (0027)


class OutcomeBatch:
    def __init__(
        self,
        *,
        threshold: int,
        interval_s: float,
        max_items: int = MAX_ITEMS,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.threshold = max(1, threshold)
        self.interval_s = interval_s
        self.max_items = max(1, max_items)
        self.max_bytes = max_bytes
        self.counts = WorkerCounts()
        self._lock = threading.Lock()
        self._pending: list[Settlement] = []
        # taken by ``take_due`` and not yet written or restored, by (job id, token)
        self._writing: dict[tuple[UUID, UUID], Settlement] = {}
        self._writing_bytes = 0
        self._since = 0.0
        self._cut = False

    def add(self, settlement: Settlement) -> None:
        with self._lock:
            if not self._pending:
                self._since = time.monotonic()
            self._pending.append(settlement)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def more(self) -> bool:
        """True if the last batch taken was cut by its bounds: the rest is due at once."""
        with self._lock:
            return self._cut and bool(self._pending)

    def leases(self) -> list[tuple[UUID, UUID]]:
        """(job id, lease token) of each outcome waiting to be written."""
        with self._lock:
            return [(s.id, s.token) for s in self._pending]

    def writing_large(self) -> bool:
        """True while a batch of ``LARGE_WRITE`` bytes or more is being written."""
        return self._writing_bytes >= LARGE_WRITE

    def _done_writing(self, batch: list[Settlement]) -> None:
        for s in batch:
            taken = self._writing.pop((s.id, s.token), None)
            if taken is not None:
                self._writing_bytes -= size_of(taken)
        if not self._writing:
            self._writing_bytes = 0

    def take_due(self, *, force: bool = False, idle: bool = False) -> list[Settlement]:
        """The batch to write now (at most ``max_items`` outcomes and about ``max_bytes``, but
        at least one), or nothing if it is better to wait for more."""
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
            taken, size = 0, 0
            for s in self._pending:
                more = size_of(s)
                if taken and (taken >= self.max_items or size + more > self.max_bytes):
                    break
                taken, size = taken + 1, size + more
            batch, self._pending = self._pending[:taken], self._pending[taken:]
            self._cut = bool(self._pending)
            for s in batch:
                self._writing[(s.id, s.token)] = s
            self._writing_bytes += size
            return batch

    def restore(self, batch: list[Settlement]) -> None:
        """Keep outcomes whose write failed, ahead of newer ones."""
        if batch:
            with self._lock:
                self._done_writing(batch)
                self._pending = batch + self._pending

    def written(self, batch: list[Settlement], matched: set[UUID]) -> None:
        """``batch`` is written (a repaired item counts for the one it replaces: same job and
        token); ``matched``: the ids whose lease still held."""
        with self._lock:
            self._done_writing(batch)
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
