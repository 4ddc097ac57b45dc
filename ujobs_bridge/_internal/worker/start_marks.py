"""Body starts recorded in the database, so a worker that dies is charged only for what started.

Why it exists: a worker holds more jobs than it runs (its prefetch: ``concurrency x
prefetch_multiplier``), and one that dies at once (SIGKILL, the OOM killer, a segfault) leaves
the rescue to decide which of them cost an attempt: only those whose body started
(``x_job_leases.started_at``, migration 0022; the others come back uncounted). A start is
recorded only once its body is about to run, never by the claim (a worker killed between its
claim and a body's start, even one headed for a free slot, must not be charged for it), in one of
two ways, each chosen so that a recorded start is a real one:

- a job on its first delivery starts at once and its start is queued here; the claim loop
  writes the queue with its next outcome write (one more statement in that transaction, no
  round trip of its own), or alone once the oldest waited ``ack_interval``; a start whose job's
  outcome goes in the same write is not written at all (the settle removes the lease). A worker
  killed in those few milliseconds is not charged for the bodies it started meanwhile;
- a job delivered before (``deliveries`` above 1: rescued, retried, snoozed, handed back), or
  one whose lease the worker could not renew for about its length (it may have been rescued
  meanwhile), has its start recorded before its body is given the job (``record``: a group
  commit on the claim connection, asynchronously committed). So a body that kills its worker
  every time gets at most its first run uncharged, and from its second delivery on each run
  costs an attempt: it still dead-letters.

A body whose definition has ``work_starts_late`` (a framework's prologue runs before its real
work: celery_compat's tasks, Celery's tracer) has its first delivery's start queued only when it
says its work starts (``later``: ``work_starts()``, in a thread or, through its keeper, in a pool
child); a worker that dies in the prologue is not charged for it. Its redeliveries are recorded
as every other's, before the body begins, prologue included.

A process pool records a start only once a child is there to take the body (spawning one can
take seconds on a loaded machine, and a worker killed meanwhile started nothing).

While the database cannot be reached, ``record`` cannot record a start, so that job waits (retried
with backoff) until it can, or until it is stopped (its signal: the shutdown hands it back
uncounted). A start refused because the lease is gone (a cancel, or a rescue after the worker was
cut off) is not made: that job must not run.

What it is not: the claim (``claims.py``), the claim loop that writes the queue
(``claim_loop.py``) or the rescue that reads the marks (``db/sql/jobs.sql``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.connections import Backoff
from ujobs_bridge._internal.worker.inflight import InFlight
from ujobs_bridge.errors import ErrorCode

log = logging.getLogger("ujobs.worker")

Lease = tuple[UUID, UUID]  # (job id, lease token)
RETRY_PAUSE_MAX_S = 1.0  # the longest pause between tries while the database is unreachable


class _Mark:
    __slots__ = ("done", "error", "kept", "lease")

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.done = False
        self.kept = False
        self.error: BaseException | None = None


class StartMarks:
    """The body starts of one worker: ``begin`` is called by whatever is about to run a body
    (a body thread, the event loop, a pool child's keeper), thread-safe. ``write`` records a
    batch of starts at once and answers the job ids whose lease is still there
    (``Claims.start``); ``wake`` tells the claim loop a queue began."""

    def __init__(
        self,
        write: Callable[[list[Lease]], set[UUID]],
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.write = write
        self.wake = wake
        self.statements = 0  # batches ``record`` wrote (tests read it)
        self._cond = threading.Condition()
        self._queue: list[_Mark] = []  # ``record``'s callers waiting for a statement
        self._writing = False
        self._lock = threading.Lock()
        self._pending: dict[UUID, UUID] = {}  # started, to be written by the claim loop
        self._since = 0.0  # monotonic: when the oldest pending start was queued

    # ------------------------------------------------------------------ the runtimes' side

    def must_wait(self, entry: InFlight) -> bool:
        """Whether ``begin`` would wait for the database: a redelivery, or a job whose lease
        the worker could not renew for about its length (``InFlight.doubtful``: it starts only
        if its lease is still there), not yet recorded."""
        return not entry.armed and (entry.claimed.deliveries > 1 or entry.doubtful)

    def later(self, entry: InFlight) -> Callable[[], bool] | None:
        """For a body whose definition has ``work_starts_late`` (a framework's prologue runs
        before its real work) on a first delivery: the call that queues its start once the body
        says its work starts (``work_starts``; ``begin`` then), and nothing is queued before.
        None when its start is recorded as it begins (``begin``): every other job, and a
        redelivery or a doubtful lease (``must_wait``), whose start is recorded before the body
        is given the job, prologue included, so a body that kills its worker in its prologue
        every time still spends its attempts."""
        if not entry.definition.work_starts_late or entry.armed or self.must_wait(entry):
            return None
        return functools.partial(self.begin, entry)

    def begin(self, entry: InFlight) -> bool:
        """``entry``'s body is about to start: True if it may, False if it must not (its lease
        is gone: its signal is then aborted, ``UJ_LEASE_LOST``; or it was stopped before the
        database could be reached). The caller reports a False as a body that never ran
        (``BodyResult()``). Waits only for a redelivery (``must_wait``); never raises for the
        database."""
        if entry.armed:  # the claim recorded it
            return True
        if self.must_wait(entry):
            return self.record(entry)
        with self._lock:
            first = not self._pending
            if first:
                self._since = time.monotonic()
            self._pending[entry.claimed.id] = entry.claimed.lease_token
        entry.armed = True
        if first:
            self.wake()
        return True

    def record(self, entry: InFlight) -> bool:
        """Record ``entry``'s start now and wait for it (see ``begin``)."""
        lease = (entry.claimed.id, entry.claimed.lease_token)
        pause = Backoff(cap_s=RETRY_PAUSE_MAX_S)
        while not entry.signal.aborted:
            try:
                kept = self._together(lease)
            except (psycopg.Error, OSError) as exc:  # the database is away: the job waits
                if pause.failures == 0:
                    text = str(exc).strip()
                    log.warning(
                        "ujobs.worker.start_waits: job %s starts once its start can be "
                        "recorded: %s",
                        entry.claimed.id,
                        text.splitlines()[0] if text else repr(exc),
                    )
                entry.signal.event.wait(pause.next())
                continue
            entry.armed = kept
            if not kept:
                entry.signal.abort(
                    ErrorCode.LEASE_LOST, "the lease was gone before the body started"
                )
            return kept
        return False

    def _together(self, lease: Lease) -> bool:
        """Queue ``lease``; the first thread to find no statement in flight writes the queue
        (its own lease among it), the others wait for it. Raises the write's error."""
        mark = _Mark(lease)
        batch: list[_Mark] = []
        with self._cond:
            self._queue.append(mark)
            while self._writing and not mark.done:
                self._cond.wait()
            if not mark.done:
                self._writing = True
                batch, self._queue = self._queue, []
        if batch:
            self._lead(batch)
        if mark.error is not None:
            raise mark.error
        return mark.kept

    def _lead(self, batch: list[_Mark]) -> None:
        kept: set[UUID] = set()
        error: BaseException | None = None
        try:
            kept = self.write([m.lease for m in batch])
            self.statements += 1
        except BaseException as exc:  # each caller of the batch gets it, this one too
            error = exc
        with self._cond:
            for m in batch:
                m.kept, m.error, m.done = m.lease[0] in kept, error, True
            self._writing = False
            self._cond.notify_all()

    # ------------------------------------------------------------------ the claim loop's side

    def __bool__(self) -> bool:
        return bool(self._pending)

    def take(
        self, *, interval_s: float, force: bool = False, settled: Iterable[UUID] = ()
    ) -> list[Lease]:
        """The queued starts to write now: all of them if ``force`` (an outcome write carries
        them) or once the oldest has waited ``interval_s``, else none; never those of jobs in
        ``settled`` (their outcomes go in the same write, which removes their leases)."""
        with self._lock:
            if not self._pending:
                return []
            if not force and time.monotonic() - self._since < interval_s:
                return []
            pending, self._pending = self._pending, {}
        for job_id in settled:
            pending.pop(job_id, None)
        return list(pending.items())

    def restore(self, leases: list[Lease]) -> None:
        """Keep starts whose write failed, to be written with the next."""
        if not leases:
            return
        with self._lock:
            if not self._pending:
                self._since = time.monotonic()
            for job_id, token in leases:
                self._pending.setdefault(job_id, token)
