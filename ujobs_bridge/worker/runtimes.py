"""Where a claimed job's body runs: a body thread, the event loop (``async def``), or a child
process, each with the attempt's durable steps bound.

Why it exists: the three places differ in how a body is started, timed out and stopped, but all
end in the same ``_complete``; keeping them apart from the claim loop keeps each readable.

What it is not: the outcome table (``attempt.py``) or the claim loop (``loop.py``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from concurrent.futures import Executor, Future
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..clock import Clock
from ..db.steps import Lease
from ..errors import AttemptAborted, ErrorCode
from ..steps import StepRunner
from . import attempt as attempt_mod
from .attempt import BodyResult
from .body_threads import BodyThreads
from .child import body_result_from_child, child_run
from .config import WorkerConfig
from .stopping import InFlight


class BodyRunning:
    """Mixed into ``Worker``; relies on the attributes declared here."""

    dsn: str
    id: str
    clock: Clock
    config: WorkerConfig
    _lock: threading.Lock
    _stopping: threading.Event
    _executor: Executor | None
    _threads: BodyThreads[InFlight] | None
    _aloop: asyncio.AbstractEventLoop | None
    _step_pool: ConnectionPool[psycopg.Connection[Any]] | None

    def _complete(
        self, entry: InFlight, result: BodyResult | None, *, expired: bool = False
    ) -> None:
        raise NotImplementedError

    def _dispatch(self, entry: InFlight) -> None:
        definition = entry.definition
        if self.config.pool == "processes":
            assert self._executor is not None
            future = self._executor.submit(child_run, entry.claimed)
            if definition.timeout_s is not None:
                entry.deadline = time.monotonic() + definition.timeout_s
            future.add_done_callback(functools.partial(self._process_done, entry))
            entry.future = future
        elif definition.is_async:
            assert self._aloop is not None
            entry.future = asyncio.run_coroutine_threadsafe(self._run_async(entry), self._aloop)
        else:
            assert self._threads is not None
            self._threads.submit(entry)

    def _run_thread(self, entry: InFlight) -> None:
        with self._lock:
            if entry.dropped:
                return
            if self._stopping.is_set():
                # Draining: a prefetched job must not start now; stop() hands it back uncounted.
                return
            entry.started = True
        if entry.signal.aborted:
            self._complete(entry, BodyResult())
            return
        timeout = entry.definition.timeout_s
        if timeout is not None:
            entry.deadline = time.monotonic() + timeout
        result = attempt_mod.run_sync(
            entry.definition, entry.claimed, entry.signal, self._steps_for(entry)
        )
        self._complete(entry, result)

    async def _run_async(self, entry: InFlight) -> None:
        timeout = entry.definition.timeout_s
        try:
            if timeout is None:
                result = await attempt_mod.run_async(
                    entry.definition, entry.claimed, entry.signal, self._steps_for(entry)
                )
            else:
                result = await asyncio.wait_for(
                    attempt_mod.run_async(entry.definition, entry.claimed, entry.signal), timeout
                )
        except TimeoutError:
            entry.signal.abort(
                ErrorCode.JOB_TIMEOUT, f"the attempt ran past its {timeout}s timeout"
            )
            result = BodyResult(
                error=AttemptAborted(ErrorCode.JOB_TIMEOUT, f"timed out after {timeout}s")
            )
        except asyncio.CancelledError:
            result = BodyResult()
        self._complete(entry, result)

    def _process_done(self, entry: InFlight, future: Future[Any]) -> None:
        if future.cancelled():
            return
        try:
            reply = future.result()
        except BaseException as exc:  # the child died or could not run the job
            self._complete(entry, BodyResult(error=exc))
            return
        self._complete(entry, body_result_from_child(reply))

    def _steps_for(self, entry: InFlight) -> StepRunner:
        claimed = entry.claimed
        return StepRunner(
            lease=Lease(claimed.id, claimed.lease_token, claimed.attempt),
            connection=self._step_connection,
            signal=entry.signal,
            clock=self.clock,
        )

    def _step_connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """Step writes use their own small pool (durable commits), never the claim connection."""
        if self._step_pool is None:
            with self._lock:
                if self._step_pool is None:
                    self._step_pool = ConnectionPool(
                        self.dsn,
                        min_size=1,
                        max_size=self.config.concurrency + 1,
                        kwargs={
                            "autocommit": True,
                            "application_name": f"ujobs:worker:{self.id}:steps"[:63],
                        },
                        open=True,
                        name="ujobs-steps",
                    )
        return self._step_pool.connection()

    # ------------------------------------------------------------------ outcomes
