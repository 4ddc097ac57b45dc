"""The in-flight table: every attempt a worker holds, and THE one place an attempt is settled.

Why it exists: an attempt can end in several ways at nearly the same moment (its body returns,
its timeout passes, a cancel or a lost lease arrives, the shutdown hands it back), and its
outcome must be written exactly once. ``settle_once`` is the only code that marks an attempt
settled, queues its ``Settlement`` and frees its slot, and it does all three under one lock, so
"exactly once" is checked in one place instead of in every path that stops an attempt. It also
names, for the runtimes and the stopper below the worker, how a body that returned is reported
(``Finished``) and what a body still running past its timeout is (``HungAttempt``). The log line
and the metrics of a settled attempt are observers: one that raises is logged, never undoes the
settle. ``report_died`` is how a runtime reports an attempt whose thread met an error of our
own (its attempt fails and is retried per policy, the thread serves on).

Attempts are keyed by (job id, lease token): the same job can be held twice, its earlier attempt
settled (timed out, its lease lost) while its body still runs, and a retry claimed again by this
worker; each is released by its own body. An attempt whose hung body's thread was abandoned
(``abandon``) holds no slot any more (``len``), and is listed as hung until its body returns.

What it is not: the decision of what the outcome is (``attempt.py``), or the writer of outcomes
(``outcome_batch.py`` batches them, the claim loop writes them).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.jobs.error_text import describe
from ujobs_bridge._internal.observe import metrics
from ujobs_bridge._internal.worker import job_log
from ujobs_bridge._internal.worker.attempt import BodyResult, body_died
from ujobs_bridge._internal.worker.outcome_batch import OutcomeBatch
from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.job import JobDefinition
from ujobs_bridge.records import ClaimedJob, Settlement

log = logging.getLogger("ujobs.worker")


@dataclass(slots=True, eq=False)
class InFlight:
    """One held attempt. ``settled`` is written only by ``InFlightTable.settle_once``."""

    claimed: ClaimedJob
    definition: JobDefinition[Any, Any]
    signal: AttemptSignal = field(default_factory=AttemptSignal)
    future: Future[Any] | None = None  # event-loop and process bodies; thread bodies: `started`
    armed: bool = False  # its start is recorded in the database (start_marks.py): it may run
    doubtful: bool = False  # its lease could not be renewed: its start is recorded before it runs
    started: bool = False  # a body thread took it (thread runtime)
    dropped: bool = False  # taken back before it started: a body thread must skip it
    started_at: float | None = None  # wall clock, when a body thread took it (the attempts command)
    deadline: float | None = None  # monotonic; thread and process bodies (the loop times its own)
    settled: bool = False  # its outcome is decided (and queued, unless there is none to write)
    reported_hung: bool = False  # logged as a body running past its timeout
    abandoned: bool = False  # hung, its thread abandoned: it holds no slot (``InFlightTable``)
    claimed_at: float = 0.0  # monotonic, for the attempt duration metric


# How a runtime reports a body that returned (on the runtime's thread): the attempt and its result.
Finished = Callable[[InFlight, BodyResult], None]


def _observer_failed(entry: InFlight, exc: BaseException) -> None:
    with contextlib.suppress(Exception):  # a logging filter that raises
        log.warning("ujobs.worker.observer_failed: job %s: %s", entry.claimed.id, describe(exc))


def report_died(finished: Finished, entry: InFlight, where: str, exc: BaseException) -> None:
    """``where`` (the thread or task that ran ``entry``'s body) met an error of our own between
    the claim and the settle: log it and report the attempt failed (``UJ_WORKER_LOST``, counted
    and retried per the job's policy). Never raises: the caller serves on."""
    with contextlib.suppress(Exception):  # a logging filter that raises
        log.error(
            "ujobs.worker.body_died: job %s (%s): %s failed: %s; its attempt fails (%s)",
            entry.claimed.id,
            entry.claimed.name,
            where,
            describe(exc),
            ErrorCode.WORKER_LOST.value,
            exc_info=exc,
        )
    try:
        finished(entry, body_died(where, exc))
    except BaseException as again:  # pragma: no cover - the worker's ``finished`` never raises
        with contextlib.suppress(Exception):
            log.critical("ujobs.worker.body_died: job %s: %s", entry.claimed.id, describe(again))


@dataclass(frozen=True, slots=True)
class HungAttempt:
    """A body still running past its timeout (its attempt already failed): for the
    ``attempts`` command and metrics."""

    job_id: UUID
    name: str
    queue: str
    attempt: int
    timeout_s: float
    overdue_s: float  # seconds since its deadline
    abandoned: bool = False  # its thread was given up: a new one serves its slot


class InFlightTable:
    """The attempts a worker holds, keyed by (job id, lease token); settled outcomes go to
    ``outcomes``."""

    def __init__(self, outcomes: OutcomeBatch, wake: threading.Event) -> None:
        self.outcomes = outcomes
        self.wake = wake  # set whenever a slot frees or an outcome is queued
        self.lock = threading.Lock()
        self._entries: dict[tuple[UUID, UUID], InFlight] = {}
        self._abandoned = 0  # entries whose hung body's thread was abandoned

    def add(self, rows: list[tuple[ClaimedJob, JobDefinition[Any, Any]]]) -> list[InFlight]:
        entries = [InFlight(claimed, definition) for claimed, definition in rows]
        with self.lock:
            for entry in entries:
                self._entries[_key(entry)] = entry
        for entry in entries:
            entry.claimed_at = time.monotonic()
            try:
                entry.claimed_at = metrics.claimed(entry.claimed)
                job_log.started(entry.claimed)
            except Exception as exc:  # an observer: the attempt runs all the same
                _observer_failed(entry, exc)
        return entries

    def settle_once(self, entry: InFlight, settlement: Settlement | None, *, release: bool) -> bool:
        """Record ``settlement`` (``None``: nothing to write) as this attempt's outcome unless
        one was recorded already; with ``release`` also free its slot (its body will not run
        any more). Returns True if this call settled it. The outcome is queued before the slot
        frees: whoever sees the slot free also sees the outcome queued."""
        with self.lock:
            first = not entry.settled
            if first:
                entry.settled = True
                if settlement is not None:
                    self.outcomes.add(settlement)
            if release and self._entries.pop(_key(entry), None) is not None and entry.abandoned:
                self._abandoned -= 1
        if first or release:
            self.wake.set()
        if first:
            try:
                job_log.settled(entry.claimed, settlement)
                outcome = "released" if settlement is None else job_log.outcome_of(settlement)
                metrics.settled(entry.claimed, outcome, entry.claimed_at)
            except Exception as exc:  # an observer: the attempt is settled all the same
                _observer_failed(entry, exc)
        return first

    def abandon(self, entry: InFlight) -> None:
        """The settled ``entry``'s hung body no longer holds a slot (a new thread took it); it
        stays listed as hung until its body returns and releases it."""
        with self.lock:
            if not entry.abandoned and _key(entry) in self._entries:
                entry.abandoned = True
                self._abandoned += 1
        self.wake.set()

    def get(self, job_id: UUID) -> InFlight | None:
        """The attempt of ``job_id`` this worker holds: the unsettled one if there are two."""
        with self.lock:
            found = [e for e in self._entries.values() if e.claimed.id == job_id]
        return next((e for e in found if not e.settled), found[0] if found else None)

    def entries(self) -> list[InFlight]:
        """Every attempt held, oldest first (abandoned hung bodies too)."""
        with self.lock:
            return list(self._entries.values())

    def unsettled(self) -> list[InFlight]:
        with self.lock:
            return [e for e in self._entries.values() if not e.settled]

    def late(self, now: float) -> list[InFlight]:
        """Unsettled attempts whose deadline (monotonic) has passed."""
        with self.lock:
            return [
                e
                for e in self._entries.values()
                if e.deadline is not None and now >= e.deadline and not e.settled
            ]

    def hung(self, before: float, *, abandoned: bool = True) -> list[InFlight]:
        """Attempts already settled whose body still runs although its deadline (monotonic)
        passed before ``before``: bodies running past their timeout (without ``abandoned``,
        only those that still hold a slot)."""
        with self.lock:
            return [
                e
                for e in self._entries.values()
                if e.settled
                and e.deadline is not None
                and e.deadline <= before
                and (abandoned or not e.abandoned)
            ]

    def free_slots(self, slots: int, slotted: Callable[[InFlight], bool]) -> int:
        """Body slots (of ``slots``) that no held attempt runs in or waits for: an attempt
        held whose body takes a slot (``slotted``) runs, waits for a slot, or hangs in one
        (unless its thread was abandoned: a new thread took its slot)."""
        with self.lock:
            busy = sum(1 for e in self._entries.values() if slotted(e) and not e.abandoned)
        return max(0, slots - busy)

    def held_leases(self) -> list[tuple[UUID, UUID]]:
        """(job id, lease token) of every attempt whose outcome is not decided yet."""
        with self.lock:
            return [
                (e.claimed.id, e.claimed.lease_token)
                for e in self._entries.values()
                if not e.settled
            ]

    def holds_any(self, ids: set[UUID]) -> bool:
        with self.lock:
            return any(e.claimed.id in ids and not e.abandoned for e in self._entries.values())

    def timed(self) -> bool:
        """True if some held attempt has a deadline to watch."""
        with self.lock:
            return any(e.deadline is not None for e in self._entries.values())

    def __len__(self) -> int:
        """Attempts that hold a slot (running or waiting for one)."""
        with self.lock:
            return len(self._entries) - self._abandoned


def _key(entry: InFlight) -> tuple[UUID, UUID]:
    return (entry.claimed.id, entry.claimed.lease_token)
