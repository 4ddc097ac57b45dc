"""How a worker stops attempts early: cancellation, lease loss, timeouts, hung bodies, rows it
cannot decode, and the hand-back of a shutdown (or of a worker whose loop died).

Why it exists: every path that ends an attempt before its body does must signal the body, stop
it if its runtime can, and decide whether there is still something to write (a lost lease or a
cancel means nothing is ours to write; the shutdown hands the job back with its attempt
uncounted; a timeout fails the attempt). Each path then settles through the in-flight table's
``settle_once``, so a body that finishes at the same moment cannot write a second outcome.

A body still running past its timeout is *hung*: its attempt is failed at once (its lease is no
longer renewed), and ``HUNG_GRACE_S`` later a WARNING ``ujobs.worker.hung`` names it. A thread
body cannot be stopped, so its thread is abandoned: a new thread takes its slot at once, and the
old one ends when its body returns. At most ``cap`` abandoned threads run at once (the worker's
``--max-hung-threads``, default twice its concurrency); one more hung body and the worker fails
(``on_overwhelmed``): it hands back everything it holds uncounted and exits 70, for its
supervisor to start a fresh process (the hung threads die with the old one). A process-pool
runtime kills a hung body's child instead (a hard time limit). A hung body whose slot is not
given to a new thread (a child not dead yet) counts as lost until it returns: the worker holds
at most ``healthy slots x prefetch`` jobs, so the jobs claimed behind it are handed back
uncounted (``UJ_WORKER_HUNG``) for a healthy worker to run, and none are claimed while every
slot hangs.

What it is not: the claim loop (``loop.py``), the outcome table (``attempt.py``) or the place
"exactly once" is enforced (``inflight.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from uuid import UUID

from ujobs_bridge._internal.worker.attempt import BodyResult, settle
from ujobs_bridge._internal.worker.inflight import HungAttempt, InFlight, InFlightTable
from ujobs_bridge._internal.worker.runtimes import Runtime
from ujobs_bridge.errors import AttemptAborted, ErrorCode
from ujobs_bridge.records import JobState, Settlement

log = logging.getLogger("ujobs.worker")

HUNG_GRACE_S = 1.0  # a body that has not returned this long after its timeout is hung


class Stopper:
    """Stops the attempts of one in-flight table that run on one runtime."""

    def __init__(
        self,
        table: InFlightTable,
        runtime: Runtime,
        *,
        cap: Callable[[], int] = lambda: 0,
        abandoned: Callable[[], int] = lambda: 0,
        on_overwhelmed: Callable[[str], None] = lambda reason: None,
    ) -> None:
        """``cap``: how many abandoned threads may run at once; ``abandoned``: how many do;
        ``on_overwhelmed``: called (with the reason) when a hung body is past the cap."""
        self.table = table
        self.runtime = runtime
        self.cap = cap
        self.abandoned = abandoned
        self.on_overwhelmed = on_overwhelmed

    def abort(self, entry: InFlight, code: ErrorCode, reason: str, *, certain: bool = True) -> None:
        """Signal the body (the first reason wins) and interrupt it if its runtime can. An
        uncertain stop (a lease the worker could not renew while the database may be down) is
        only signalled: the body may have returned and be writing its result (a pool child
        storing a Celery result through the outage), and killing it would throw that away."""
        entry.signal.abort(code, reason, certain=certain)
        if certain:
            self.runtime.interrupt(entry)

    def lease_lost(self, job_id: UUID, state: JobState | None) -> None:
        """The heartbeat found the lease gone (cancelled, or another worker may own the job),
        or, with ``state`` None, could not renew it for about a lease: the worker may be cut off
        (then another worker may rescue the job) or the database down (then nobody can, and
        the lease holds until a lease after its return). The body is stopped all the same, but
        what it ends with is written, fenced by the lease's token; a job whose body has not
        started is kept, to start only once its start is recorded (``start_marks.py``), which
        needs its lease to be still there."""
        entry = self.table.get(job_id)
        if entry is None:
            return
        if state is None:
            if not entry.armed:
                entry.doubtful = True  # it starts only once its start is recorded
                return
            self.abort(
                entry,
                ErrorCode.LEASE_LOST,
                "the worker could not renew the lease for about its length (cut off from the "
                "database, or the database down); another worker may own the job",
                certain=False,
            )
            return
        if state is JobState.CANCELLED:
            self.abort(entry, ErrorCode.JOB_CANCELLED, "the job was cancelled")
        else:
            self.abort(
                entry, ErrorCode.LEASE_LOST, "the lease was lost; another worker may own the job"
            )
        self._drop_if_unstarted(entry)

    def cancel_notified(self, payload: str) -> None:
        """An operator cancelled a job (``x_jobs_cancel``); ``payload`` is its id."""
        try:
            job_id = UUID(payload)
        except ValueError:
            return
        entry = self.table.get(job_id)
        if entry is not None:
            self.abort(entry, ErrorCode.JOB_CANCELLED, "the job was cancelled")
            self._drop_if_unstarted(entry)

    def _drop_if_unstarted(self, entry: InFlight) -> None:
        """A cancelled or lost attempt that has not started: free its slot, write nothing."""
        if self.runtime.unstart(entry):
            self.table.settle_once(entry, None, release=True)

    def check_deadlines(self) -> None:
        """Fail every attempt past its timeout; its body keeps its slot until it returns (a
        process pool kills its child). A body that has not returned ``HUNG_GRACE_S`` later is
        hung: logged once, and its thread abandoned to a new one (or, past the cap, the worker
        fails)."""
        now = time.monotonic()
        for entry in self.table.late(now):
            timeout = entry.definition.timeout_s
            reason = f"the attempt ran past its {timeout}s timeout"
            self.abort(entry, ErrorCode.JOB_TIMEOUT, reason)
            error = AttemptAborted(ErrorCode.JOB_TIMEOUT, reason)
            self._settle(entry, BodyResult(error=error), release=False)
        for entry in self.table.hung(now - HUNG_GRACE_S, abandoned=False):
            if not entry.reported_hung:
                entry.reported_hung = True
                self._hung(entry)

    def _hung(self, entry: InFlight) -> None:
        """``entry``'s body hangs past its timeout: give its slot to a new thread, or fail the
        worker if ``cap`` abandoned threads already run; always say so, naming the job."""
        claimed = entry.claimed
        what = (
            f"job {claimed.id} ({claimed.name}, attempt {claimed.attempt}) ran past its "
            f"{entry.definition.timeout_s}s timeout and its body has not returned; the attempt "
            f"failed ({ErrorCode.JOB_TIMEOUT.value})"
        )
        cap = self.cap()
        replaced = self.runtime.abandon(entry, cap)
        if replaced:
            self.table.abandon(entry)
            log.warning(
                "ujobs.worker.hung: %s; its thread is abandoned and a new thread takes its slot "
                "(%d abandoned thread(s) running, at most %d: --max-hung-threads)",
                what,
                self.abandoned(),
                cap,
            )
        elif replaced is None:
            log.warning("ujobs.worker.hung: %s; its slot stays lost until it returns", what)
        else:
            reason = (
                f"{cap} abandoned thread(s) of hung bodies still run (--max-hung-threads {cap}) "
                f"and one more body hangs (job {claimed.id}, {claimed.name})"
            )
            log.error(
                "ujobs.worker.hung: %s; %d abandoned thread(s) already run, the cap "
                "(--max-hung-threads): the worker hands back what it holds and exits (%s)",
                what,
                self.abandoned(),
                ErrorCode.WORKER_HUNG.value,
            )
            self.on_overwhelmed(reason)

    def hung(self) -> list[HungAttempt]:
        """The bodies running past their timeout, longest overdue first."""
        now = time.monotonic()
        found = [
            HungAttempt(
                e.claimed.id,
                e.claimed.name,
                e.claimed.queue,
                e.claimed.attempt,
                e.definition.timeout_s or 0.0,
                now - (e.deadline or now),
                e.abandoned,
            )
            for e in self.table.hung(now - HUNG_GRACE_S)
        ]
        return sorted(found, key=lambda h: -h.overdue_s)

    def capacity(self, concurrency: int, prefetch: int) -> tuple[int, int]:
        """How many jobs the worker may hold now, and how many it holds, hung bodies that still
        hold a slot left out (an abandoned one holds none): ``(concurrency - hung) x prefetch``. Unstarted jobs beyond it (the newest first) are
        handed back uncounted: behind hung bodies they could not start in time."""
        hung = len(self.table.hung(time.monotonic() - HUNG_GRACE_S, abandoned=False))
        capacity = max(0, concurrency - hung) * prefetch
        held = len(self.table) - hung
        if held <= capacity or not hung:  # a shrunk pool runs what it holds, just slower
            return capacity, held
        surplus = held - capacity
        for entry in reversed(self.table.entries()):
            if surplus <= 0:
                break
            if entry.settled or not self.runtime.unstart(entry):
                continue
            entry.signal.abort(
                ErrorCode.WORKER_HUNG,
                f"handed back unstarted: {hung} of {concurrency} body slots are held by "
                "bodies past their timeout",
            )
            self._settle(entry, BodyResult(), release=True)
            surplus -= 1
        given = held - capacity - surplus
        if given:
            log.warning(
                "ujobs.worker.hung: %d of %d body slots are held by hung bodies; handed back %d "
                "job(s) that could not start in time (%s)",
                hung,
                concurrency,
                given,
                ErrorCode.WORKER_HUNG.value,
            )
        return capacity, len(self.table) - hung

    def refuse_undecodable(self, entry: InFlight) -> None:
        """A claimed row whose input cannot be decoded: it fails alone, dead, with the reason;
        retrying cannot help, and the rest of its batch runs."""
        reason = entry.claimed.undecodable
        error = (
            f"{ErrorCode.PAYLOAD_UNDECODABLE.value}: the job's input could not be decoded "
            f"({reason}); it was not run"
        )
        log.error(
            "ujobs.worker.undecodable: job %s (%s): %s", entry.claimed.id, entry.claimed.name, error
        )
        dead = Settlement(
            entry.claimed.id, entry.claimed.lease_token, state=JobState.DEAD, error=error
        )
        self.table.settle_once(entry, dead, release=True)

    def hand_back_unstarted(self, code: ErrorCode = ErrorCode.WORKER_DRAINING) -> None:
        """Shutdown: every attempt whose body has not started goes back uncounted, now."""
        for entry in self.table.entries():
            if self.runtime.unstart(entry):
                entry.signal.abort(code, "handed back before it started")
                self._settle(entry, BodyResult(), release=True)

    def hand_back_running(self, code: ErrorCode = ErrorCode.WORKER_DRAINING) -> None:
        """Shutdown, after its timeout: stop what still runs and hand it back uncounted; a body
        that returns later finds its attempt settled."""
        reason = (
            "the worker is shutting down"
            if code is ErrorCode.WORKER_DRAINING
            else "the worker is stopping after a failure (a loop died, or bodies hung past the cap)"
        )
        for entry in self.table.unsettled():
            self.abort(entry, code, reason)
            self._settle(entry, BodyResult(), release=False)

    def _settle(self, entry: InFlight, result: BodyResult, *, release: bool) -> None:
        decided = settle(entry.definition, entry.claimed, result, entry.signal)
        self.table.settle_once(entry, decided, release=release)
