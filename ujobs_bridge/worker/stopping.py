"""How a worker stops attempts early: cancellation, lease loss, timeouts and the shutdown's
hand-back.

Why it exists: every path that ends an attempt before its body does must signal the body, stop
it if its runtime can, and decide whether there is still something to write (a lost lease or a
cancel means nothing is ours to write; the shutdown hands the job back with its attempt
uncounted; a timeout fails the attempt). Each path then settles through the in-flight table's
``settle_once``, so a body that finishes at the same moment cannot write a second outcome.

What it is not: the claim loop (``loop.py``), the outcome table (``attempt.py``) or the place
"exactly once" is enforced (``inflight.py``).
"""

from __future__ import annotations

import time
from uuid import UUID

from ..errors import AttemptAborted, ErrorCode
from ..records import JobState
from .attempt import BodyResult, settle
from .inflight import InFlight, InFlightTable
from .runtimes import Runtime


class Stopper:
    """Stops the attempts of one in-flight table that run on one runtime."""

    def __init__(self, table: InFlightTable, runtime: Runtime) -> None:
        self.table = table
        self.runtime = runtime

    def abort(self, entry: InFlight, code: ErrorCode, reason: str) -> None:
        """Signal the body (the first reason wins) and interrupt it if its runtime can."""
        entry.signal.abort(code, reason)
        self.runtime.interrupt(entry)

    def lease_lost(self, job_id: UUID, state: JobState | None) -> None:
        """The heartbeat found the lease gone: cancelled, or another worker may own the job."""
        entry = self.table.get(job_id)
        if entry is None:
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
        """Fail every attempt past its timeout; its body keeps its slot until it returns."""
        for entry in self.table.late(time.monotonic()):
            timeout = entry.definition.timeout_s
            reason = f"the attempt ran past its {timeout}s timeout"
            self.abort(entry, ErrorCode.JOB_TIMEOUT, reason)
            error = AttemptAborted(ErrorCode.JOB_TIMEOUT, reason)
            self._settle(entry, BodyResult(error=error), release=False)

    def hand_back_unstarted(self) -> None:
        """Shutdown: every attempt whose body has not started goes back uncounted, now."""
        for entry in self.table.entries():
            if self.runtime.unstart(entry):
                entry.signal.abort(ErrorCode.WORKER_DRAINING, "handed back before it started")
                self._settle(entry, BodyResult(), release=True)

    def hand_back_running(self) -> None:
        """Shutdown, after its timeout: stop what still runs and hand it back uncounted; a body
        that returns later finds its attempt settled."""
        for entry in self.table.unsettled():
            self.abort(entry, ErrorCode.WORKER_DRAINING, "the worker is shutting down")
            self._settle(entry, BodyResult(), release=False)

    def _settle(self, entry: InFlight, result: BodyResult, *, release: bool) -> None:
        decided = settle(entry.definition, entry.claimed, result, entry.signal)
        self.table.settle_once(entry, decided, release=release)
