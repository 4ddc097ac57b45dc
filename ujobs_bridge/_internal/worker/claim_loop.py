"""The worker's claim loop: write due outcomes and claim free slots, then wait to be woken.

Why it exists: the claim loop is the worker's one busy thread, and its pass is where the
durability order is kept: due outcomes are written and free slots claimed in ONE transaction (one
commit per cycle), outcomes before the sweep (so after an outage longer than a lease this
worker's own sweep does not rescue the jobs whose results it holds), and an outcome batch the
database refuses is kept (an error of the connection: ``connections.connection_state``) or
written item by item to isolate the bad one. Being
a ``Service``, it restarts after an error with a growing pause and ends the worker after
``CLAIM_ERROR_STREAK`` errors in a row that are not database errors. Before it waits with free
slots it marks its queues as waited for (migration 0021: only then does an insert into them
notify, and then this worker alone per job, on its own channel: 0025), and it removes the marks
once its claims fill every free slot, so that producers send no notification while every worker
of a queue is busy with a backlog. Since one job wakes one worker, an empty claim needs no pause
after it: there is no herd of woken workers to damp. A marked worker is also armed for hand-offs
(migration 0027): a job due now that arrives in its queue is written as its claim by the insert
and sent to it whole (``handed``); the pass runs it like a claimed row, without a claim, and arms
the marks again while a slot is free. Hand-offs whose notification never arrived (a dropped
listen connection) are asked for once the listener is back (``relisten``), and at shutdown they
go back, uncounted, with the rest (``hand_back_unknown``). The worker composes it
and passes in what it drives (the claims, the in-flight table, the outcome batch, the stopper,
the worker's dispatch and wake-up); it never imports the worker back.

What it is not: the worker (``loop.py``: its collaborators, lifecycle and dispatch of claimed
rows), the claim statements (``claims.py``) or the outcome batching (``outcome_batch.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.connections import Backoff, connection_state
from ujobs_bridge._internal.faults import fault
from ujobs_bridge._internal.service import Service
from ujobs_bridge._internal.worker.outcome_writes import write_isolating
from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.records import ClaimedJob, JobState, Settlement

if TYPE_CHECKING:
    from ujobs_bridge._internal.worker.autoscale import Autoscaler
    from ujobs_bridge._internal.worker.claims import Claims
    from ujobs_bridge._internal.worker.inflight import InFlightTable
    from ujobs_bridge._internal.worker.outcome_batch import OutcomeBatch
    from ujobs_bridge._internal.worker.start_marks import StartMarks
    from ujobs_bridge._internal.worker.stopping import Stopper

log = logging.getLogger("ujobs.worker")

RETRY_PAUSE_MAX_S = 5.0
RECOVERED_KEPT = 4096  # hand-offs found by asking whose late notification is still dropped  # the longest pause after failed passes of the claim loop
CLAIM_ERROR_STREAK = 30  # failed passes in a row (not database errors) that end the worker


class ClaimLoop(Service):
    """The worker's claim loop as a ``Service`` (thread ``ujobs-claim``): ``cycle`` again and
    again; an error resets the claim connection and pauses, longer after each failure in a
    row (``Backoff``: 50 ms doubling up to 5 s), so an outage is retried quickly at first and
    cheaply later, with every outcome kept; ``CLAIM_ERROR_STREAK`` errors in a row that are not
    database errors end the worker (``Service.on_died``)."""

    def __init__(
        self,
        *,
        claims: Claims,
        table: InFlightTable,
        outcomes: OutcomeBatch,
        stopper: Stopper,
        autoscaler: Autoscaler | None,
        take_due: Callable[[], list[Settlement]],
        dispatch: Callable[[list[ClaimedJob]], object],
        starts: StartMarks,
        jobs_lock: threading.Lock,
        wake: threading.Event,
        worker_stopping: threading.Event,
        listening: threading.Event,
    ) -> None:
        """The worker's collaborators (``loop.Worker`` composes this loop): ``take_due``, its
        outcomes due now; ``dispatch``, starts claimed rows on a runtime (under ``jobs_lock``,
        which guards the registry a pass claims with);
        ``starts``, the starts of bodies to record (with the next outcome write, or alone once
        the oldest waited ``ack_interval``; a claim records none: a worker that dies between
        its claim and a body's start must not be charged for it); ``wake``, set to end a wait;
        ``worker_stopping``, set once the worker stops claiming; ``listening``, the listener's.
        The configuration read is the claims' (``resize`` replaces both at once)."""
        self.claims, self.table, self.outcomes = claims, table, outcomes
        self.stopper, self.autoscaler = stopper, autoscaler
        self.take_due, self.dispatch, self.jobs_lock = take_due, dispatch, jobs_lock
        self.starts = starts
        self.wake, self.worker_stopping, self.listening = wake, worker_stopping, listening
        self.backoff = Backoff(cap_s=RETRY_PAUSE_MAX_S)
        self.short: bool | None = None  # the last pass's claim: fewer rows than free slots?
        self.look = True  # the next pass claims even while marked (see notified, _worth_a_claim)
        self.poll_at = 0.0  # monotonic: the poll's claim is due (poll_s after the last claim)
        self.waiting: tuple[str, ...] | None = None  # the queues marked as waited for (0021)
        self.unsure = False  # the marks may differ from ``waiting`` (an error; a poll's re-check)
        self.armed = False  # the marks are armed for a hand-off (0027), as far as this loop knows
        self.handed: list[ClaimedJob] = []  # hand-offs heard, not yet taken (the listener adds)
        self.recover = False  # ask for hand-offs whose notification was missed (``relisten``)
        self.stale_marks = False  # the marks name task names this worker no longer runs
        # Hand-offs found by asking (``recover``), whose notification may still come: never
        # run twice (bounded: the oldest are forgotten first).
        self._recovered: dict[UUID, None] = {}
        self._handed_lock = threading.Lock()
        # Set while the loop waits with its pass done (until woken or polled): a worker that
        # marked its queues has taken its one claim after the mark by then (``_mark_waiting``).
        self.resting = threading.Event()
        super().__init__("claim", interval_s=RETRY_PAUSE_MAX_S, error_streak=CLAIM_ERROR_STREAK)

    def notified(self) -> None:
        """The listener's wake-up: an insert picked this worker (or, after a reconnect, anything
        committed while nobody listened may be there): the next pass claims."""
        self.look = True
        self.wake.set()

    def hand_off(self, claimed: ClaimedJob | None) -> None:
        """The listener's hand-off (0027): a job the insert claimed for this worker (None: a
        notification this version could not read; the next pass asks for the missed ones)."""
        with self._handed_lock:
            if claimed is None:
                self.recover = True
            else:
                self.handed.append(claimed)
            self.armed = False  # the sender disarmed the mark
        self.wake.set()

    def relisten(self) -> None:
        """The listener is listening again (a fresh connection): hand-offs sent while it was
        away were never heard; the next pass asks for them, claims, and arms the marks again
        (a hand-off it never heard disarmed them)."""
        with self._handed_lock:
            self.recover = True
            self.armed = False
        self.notified()

    def names_changed(self) -> None:
        """A reload changed the task names: the marks are written anew before the next wait
        (a hand-off must never bring a job of a name this worker no longer runs)."""
        self.stale_marks = True
        self.notified()

    def _take_handed(self) -> list[ClaimedJob]:
        """The hand-offs heard since the last pass, and those missed if asked (``recover``),
        minus any this worker holds already."""
        with self._handed_lock:
            rows, self.handed = self.handed, []
            recover, self.recover = self.recover, False
        heard: list[ClaimedJob] = []
        for r in rows:
            if r.id in self._recovered:
                del self._recovered[r.id]  # found by asking already: its late notification
            else:
                heard.append(r)
        if recover:
            held = {job_id for job_id, _ in self.table.held_leases() + self.outcomes.leases()}
            held.update(r.id for r in heard)
            try:
                found = self.claims.handed_unknown(held)
            except BaseException:
                with self._handed_lock:
                    self.recover = True
                    self.handed[:0] = heard
                raise
            for r in found:
                self._recovered[r.id] = None
            while len(self._recovered) > RECOVERED_KEPT:
                del self._recovered[next(iter(self._recovered))]
            heard += found
        return [r for r in heard if self.table.get(r.id) is None]

    def _run_handed(self, rows: list[ClaimedJob]) -> list[ClaimedJob]:
        """Run hand-offs as claimed rows (under ``jobs_lock``); those this worker cannot run (a
        name it no longer runs after a reload, or it is stopping) go back uncounted, as a
        drain hands back what it did not start."""
        runs: list[ClaimedJob] = []
        for row in rows:
            if self.worker_stopping.is_set() or row.name not in self.claims.names:
                self.outcomes.add(handed_back(row))
            else:
                runs.append(row)
        if runs:
            self.dispatch(runs)
            self.claims.counts.hand_offs += len(runs)
        return runs

    def hand_back_unknown(self) -> int:
        """Shutdown, once the claim loop has stopped: the hand-offs it never ran (heard but not
        taken, or never heard) go back uncounted with the outcomes still to write."""
        with self._handed_lock:
            rows, self.handed = self.handed, []
        held = {job_id for job_id, _ in self.table.held_leases() + self.outcomes.leases()}
        held.update(r.id for r in rows)
        rows += self.claims.handed_unknown(held)
        for row in rows:
            if self.table.get(row.id) is None:
                self.outcomes.add(handed_back(row))
        return len(rows)

    def _worth_a_claim(self) -> bool:
        """Whether a pass with free slots claims. Always, unless this worker's queues are
        marked as waited for with certainty: then an insert into them notifies it (and a job
        that comes due later is found by the poll), so only a notification, a poll or a mark
        just added is a reason to look. Wake-ups for a body's start or an outcome are not:
        claiming on each of them found nothing, two empty claims per job in an idle fleet."""
        return self.waiting is None or self.unsure or self.look or time.monotonic() >= self.poll_at

    def tick(self) -> bool:
        """One pass: write due outcomes, claim free slots; True if every free slot was filled."""
        return self.claim_pass()

    def cycle(self) -> None:
        """One turn of the claim loop: a pass, then, unless it filled every free slot, a wait
        until woken (a notification, a freed slot, a queued outcome) or the next poll."""
        self.wake.clear()
        if self.worker_stopping.is_set():
            return
        filled = self.claim_pass()
        if self.short is False and (self.waiting is not None or self.unsure):
            self.claims.unmark_waiting()  # busy: inserts need not wake this worker
            self.waiting, self.unsure = None, False
        if filled:
            return  # every free slot filled, or more outcomes due: the next pass at once
        if self.short and self._mark_waiting():
            self.look = True
            return  # marked just now: claim once more before waiting (see _mark_waiting)
        if self.waiting is not None and not self.armed and not self.unsure:
            self._arm()
        wait = self.poll_at - time.monotonic()
        if wait <= 0:  # no claim this pass (no free slot to fill): a poll's length from now
            wait = self.claims.config.poll_s
        if self.outcomes or self.starts:
            wait = min(wait, self.claims.config.ack_interval_s)
        if self.table.timed():
            wait = min(wait, 0.05)
        self.resting.set()
        try:
            woken = self.wake.wait(wait)
        finally:
            self.resting.clear()
        if not woken and time.monotonic() >= self.poll_at:
            self.unsure = True  # the poll: its claim asserts the mark again (a mark the
            # database lost, or reaped with the node), and finds jobs that came due meanwhile

    def _mark_waiting(self) -> bool:
        """Before waiting with free slots: mark this worker's queues as waited for (migration
        0021), so that an insert into them notifies. True if a mark was added: the caller claims
        once more before it waits, since a job committed after the last claim but before the mark
        sent no notification. Not marked: a worker that is not listening (no listen connection,
        or it is reconnecting: its poll wakes it), a stopping one, or one whose node is not
        registered (reaped after an outage; marked again once it is)."""
        queues = self.claims.queues
        if self.worker_stopping.is_set() or not self.listening.is_set():
            return False
        if self.waiting == queues and not self.unsure and not self.stale_marks:
            return False
        if self.waiting is not None and (self.waiting != queues or self.stale_marks):
            self.claims.unmark_waiting()  # a reload changed its queues or names: marks anew
            self.waiting = None
        self.stale_marks = False
        registered, added = self.claims.mark_waiting()
        self.waiting, self.unsure = (queues if registered else None), False
        self.armed = registered and added > 0 and self.claims.hand_offs is not None
        return added > 0

    def _arm(self) -> None:
        """Arm the marks again for a hand-off, if a slot is free for one (a hand-off took the
        last arming; a mark kept from before is armed here too)."""
        if self.claims.hand_offs is None or self.worker_stopping.is_set():
            return
        capacity, held = self.stopper.capacity(
            self.claims.config.concurrency, self.claims.config.prefetch_multiplier
        )
        if held >= capacity:
            return
        with self._handed_lock:
            if self.handed:
                return  # a hand-off is waiting for the next pass: arm after it
            self.armed = True
        self.claims.arm()

    def claim_pass(self) -> bool:
        """Write due outcomes and claim free slots in ONE transaction: one commit (one fsync)
        per cycle instead of two. Outcomes go before the sweep: after an outage longer than a
        lease, this worker's own sweep must not rescue the jobs whose results it holds."""
        self.short = None
        self.stopper.check_deadlines()
        capacity, held = self.stopper.capacity(
            self.claims.config.concurrency, self.claims.config.prefetch_multiplier
        )
        scaler = self.autoscaler  # with one job per slot, hold one waiting: a reason to grow
        if (
            scaler
            and self.claims.config.prefetch_multiplier == 1
            and self.claims.config.concurrency < scaler.max
        ):
            capacity += 1
        handed = self._take_handed()
        if handed:
            with self.jobs_lock:
                held += len(self._run_handed(handed))
        batch = self.take_due()
        if not batch and self.claims.sweep():
            self.look = True  # rescued jobs are ready again, and no insert announced them
        free = capacity - held
        if handed and free <= 0:
            self.short = False  # hand-offs filled every free slot: busy, as a full claim says
        want = 0
        if (
            free > 0
            and not self.worker_stopping.is_set()
            and (not held or free >= max(1, capacity // 2))
        ):
            want = min(free, self.claims.config.claim_batch)
        if want and not self._worth_a_claim():
            want = 0
        elif want:
            self.look = False  # a notification from now on asks for the next claim
            self.poll_at = time.monotonic() + self.claims.config.poll_s
        starts = self.starts.take(  # with the outcomes, or alone once due
            interval_s=self.claims.config.ack_interval_s,
            force=bool(batch),
            settled=[s.id for s in batch],
        )
        if not batch and not want:
            if starts:
                self._record_starts(starts)
            return False
        rows: list[ClaimedJob] = []
        with self.jobs_lock:  # what a pass claims, it runs with the same registry
            try:
                if batch and want:
                    matched, rows = self.claims.write_then_claim(batch, want, starts=starts)
                elif batch:
                    matched = self.claims.write(batch, starts)
                else:  # claims alone: autocommit, asynchronous commit (see db/sql/session.sql)
                    if starts:
                        self.claims.start(starts)
                    matched, rows = set(), self.claims.claim(want)
            except Exception as exc:  # whatever failed, the outcomes are kept
                self.starts.restore(starts)
                if not batch or connection_state(exc):
                    self.outcomes.restore(batch)
                    raise
                log.warning("ujobs.worker.outcomes_refused: isolating the bad item: %s", exc)
                write_isolating(self.claims.write, batch, self.outcomes)  # keeps what it can't
                want = 0
            else:
                if rows:
                    fault("worker.after_claim")  # a worker dying here started none of them
                self.outcomes.written(batch, matched)
                self.dispatch(rows)
                if want:
                    self.short = len(rows) < free
                    self.claims.counts.claims += 1
                    self.claims.counts.empty_claims += 0 if rows else 1
        if batch and self.claims.sweep():
            self.look = True  # the next pass claims what the sweep made ready again
        if rows:
            self.claims.tidy(len(rows))
        return (want > 0 and len(rows) == want) or self.outcomes.more()

    def _record_starts(self, starts: list[tuple[UUID, UUID]]) -> None:
        """Record the starts of bodies that began (a failed write keeps them for the next)."""
        try:
            self.claims.start(starts)
        except Exception:
            self.starts.restore(starts)
            raise

    def _pass(self) -> float:
        if self.worker_stopping.is_set():  # asked before start(): take no pass at all
            self.request_stop()
            return 0.0
        self.cycle()
        self.backoff.reset()
        if len(self.table):
            fault("worker.claim_loop")
        return 0.0

    def _on_error(self, exc: Exception) -> float:
        self.claims.reset()
        self.unsure = True  # a mark written or deleted may or may not be in: asserted again
        self.armed = False  # an arming may not have landed either: armed again once marked
        if isinstance(exc, psycopg.Error):
            log.warning("ujobs.worker.db_error: %s", exc)
        else:
            log.exception("ujobs.worker.error")
        return self.backoff.next()


def handed_back(row: ClaimedJob) -> Settlement:
    """A hand-off this worker does not run, back to ready with its attempt given back."""
    return Settlement(
        row.id,
        row.lease_token,
        state=JobState.READY,
        error=f"{ErrorCode.WORKER_DRAINING.value}: handed back before it started",
        uncount=1,
    )
