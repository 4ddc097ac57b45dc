"""How a worker stops attempts: cancellation, lease loss, timeouts and the drain's hand-back.

Why it exists: every path that ends an attempt early must signal the body, decide whether there
is still something to write (a lost lease means nothing is ours to write; a drain hands the job
back with its attempt uncounted; a timeout fails the attempt), and do it exactly once even when
the body finishes at the same moment. Keeping those paths together is what makes "exactly once"
checkable.

What it is not: the claim loop (``loop.py``) or the outcome table (``attempt.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ..context import AttemptSignal
from ..errors import AttemptAborted, ErrorCode
from ..job import JobDefinition
from ..records import ClaimedJob, JobState, Settlement
from . import attempt as attempt_mod
from .attempt import BodyResult
from .config import WorkerConfig
from .outcome_batch import AckBatch

log = logging.getLogger("ujobs.worker")


@dataclass(slots=True, eq=False)
class InFlight:
    claimed: ClaimedJob
    definition: JobDefinition[Any, Any]
    signal: AttemptSignal = field(default_factory=AttemptSignal)
    future: Future[Any] | None = None  # async and process bodies; thread bodies use `started`
    started: bool = False
    dropped: bool = False  # taken back before it started: a body thread must skip it
    deadline: float | None = None  # monotonic
    settled: bool = False  # an outcome was already written (timeout, drain, lease lost)


class AttemptStopping:
    """Mixed into ``Worker``; relies on the attributes declared here."""

    config: WorkerConfig
    acks: AckBatch
    _lock: threading.Lock
    _wake: threading.Event
    _inflight: dict[UUID, InFlight]

    def _record_settlement(self, entry: InFlight, settlement: Settlement | None) -> None:
        entry.settled = True
        if settlement is None:
            self._wake.set()
            return
        self.acks.add(settlement)
        if not self._wake.is_set():
            self._wake.set()

    def _abort(self, entry: InFlight, code: ErrorCode, reason: str) -> None:
        entry.signal.abort(code, reason)
        future = entry.future
        if future is not None and entry.definition.is_async and self.config.pool == "threads":
            future.cancel()

    def _held_leases(self) -> list[tuple[UUID, UUID]]:
        with self._lock:
            return [
                (e.claimed.id, e.claimed.lease_token)
                for e in self._inflight.values()
                if not e.settled
            ]

    def _lease_lost(self, job_id: UUID, state: JobState | None) -> None:
        with self._lock:
            entry = self._inflight.get(job_id)
        if entry is None:
            return
        if state is JobState.CANCELLED:
            self._abort(entry, ErrorCode.JOB_CANCELLED, "the job was cancelled")
        else:
            self._abort(
                entry, ErrorCode.LEASE_LOST, "the lease was lost; another worker may own the job"
            )
        self._drop_if_unstarted(entry)

    def _cancel_notified(self, payload: str) -> None:
        try:
            job_id = UUID(payload)
        except ValueError:
            return
        with self._lock:
            entry = self._inflight.get(job_id)
        if entry is not None:
            self._abort(entry, ErrorCode.JOB_CANCELLED, "the job was cancelled")
            self._drop_if_unstarted(entry)

    def _unstart(self, entry: InFlight) -> bool:
        """Take back a job whose body has not started; True if it will never start."""
        if entry.future is not None:
            return entry.future.cancel()
        with self._lock:
            if entry.started:
                return False
            entry.dropped = True
            return True

    def _drop_if_unstarted(self, entry: InFlight) -> None:
        if self._unstart(entry):
            with self._lock:
                self._inflight.pop(entry.claimed.id, None)
            entry.settled = True
            self._wake.set()

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [
                e
                for e in self._inflight.values()
                if e.deadline is not None and now >= e.deadline and not e.settled
            ]
        for entry in late:
            timeout = entry.definition.timeout_s
            reason = f"the attempt ran past its {timeout}s timeout"
            self._abort(entry, ErrorCode.JOB_TIMEOUT, reason)
            error = AttemptAborted(ErrorCode.JOB_TIMEOUT, reason)
            with self._lock:
                if entry.settled:
                    continue
                entry.settled = True
            self._record_settlement(
                entry,
                attempt_mod.settle(
                    entry.definition, entry.claimed, BodyResult(error=error), entry.signal
                ),
            )

    def _hand_back_unstarted(self) -> None:
        with self._lock:
            entries = list(self._inflight.values())
        for entry in entries:
            if self._unstart(entry):
                with self._lock:
                    self._inflight.pop(entry.claimed.id, None)
                    if entry.settled:
                        continue
                entry.signal.abort(ErrorCode.WORKER_DRAINING, "handed back before it started")
                self._record_settlement(
                    entry,
                    attempt_mod.settle(entry.definition, entry.claimed, BodyResult(), entry.signal),
                )
