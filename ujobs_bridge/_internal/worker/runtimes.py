"""Where a claimed attempt's body runs: body threads, an event loop, or a process pool, behind
one interface (``Runtime``: ``submit``, ``unstart``, ``interrupt``, ``shutdown``).

Why it exists: the three places differ only in how a body is started, timed and stopped; what
runs inside is the same attempt core (``attempt.run_body`` / ``run_body_async``, and
``child.child_run`` on top of it), and every body reports to the same ``Finished`` callback.
``Runtimes`` picks one per attempt (``--pool processes`` runs everything in children; otherwise
``async def`` bodies go to the event loop and the rest to the body threads), so the claim loop
sees one runtime. The process pool lives in ``children.py``. Whatever our own code raises
between the claim and the settle (a runtime's step, an observer, the report itself) does not
end the thread or task that ran the body: the attempt is reported failed (``report_died``) and
the slot serves the next attempt.

What it is not: the outcome table (``attempt.py``), the claim loop (``loop.py``), or the place an
attempt is settled (``inflight.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ujobs_bridge._internal.clock import Clock
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db.connections import Conn, Pool, Role
from ujobs_bridge._internal.db.steps import Lease
from ujobs_bridge._internal.faults import fault
from ujobs_bridge._internal.jobs.group_commit import GroupCommit
from ujobs_bridge._internal.jobs.payload import DEFAULT_MAX_RESULT_BYTES
from ujobs_bridge._internal.worker.attempt import BodyResult, run_body, run_body_async
from ujobs_bridge._internal.worker.body_threads import BodyThreads
from ujobs_bridge._internal.worker.child import TimeLimits
from ujobs_bridge._internal.worker.children import ProcessRuntime
from ujobs_bridge._internal.worker.inflight import Finished, InFlight, report_died
from ujobs_bridge._internal.worker.start_marks import StartMarks
from ujobs_bridge._internal.worker.steering import TaskSettings
from ujobs_bridge.job import JobDefinition
from ujobs_bridge.steps import StepRunner

log = logging.getLogger("ujobs.worker")


class Runtime(Protocol):
    def submit(self, entry: InFlight) -> None:
        """Start (or queue) the attempt's body; it reports to the ``Finished`` callback."""

    def unstart(self, entry: InFlight) -> bool:
        """Take back an attempt whose body has not started; True if it never will."""

    def interrupt(self, entry: InFlight) -> None:
        """Stop a running body if this runtime can (its signal is already aborted)."""

    def abandon(self, entry: InFlight, cap: int) -> bool | None:
        """Give the slot of a hung body (past its timeout, still running) to a new thread: True
        if done; False if not, ``cap`` abandoned threads running already; None if this runtime
        does not (it stops its bodies itself) or the body has returned."""

    def shutdown(self) -> None:
        """Release the runtime; does not wait for bodies still running."""


class StepWrites:
    """The step runners of a worker's attempts, writing on their own small pool (durable
    commits), never on the claim connection. The pool opens on the first step write, holds at
    most ``max_size`` connections (the worker's concurrency + 1) and gives idle ones back
    (``connections.pool``). All the worker's bodies share one ``GroupCommit``: step results
    that gather while a commit is in flight are persisted by the next statement together."""

    def __init__(self, dsn: str, role: Role, *, clock: Clock, max_size: int) -> None:
        self.dsn = dsn
        self.role = role
        self.clock = clock
        self.max_size = max_size
        self._pool: Pool | None = None
        self._lock = threading.Lock()
        self.commits = GroupCommit(self.connection)

    def runner(self, entry: InFlight) -> StepRunner:
        claimed = entry.claimed
        return StepRunner(
            lease=Lease(claimed.id, claimed.lease_token, claimed.attempt),
            connection=self.connection,
            signal=entry.signal,
            clock=self.clock,
            commits=self.commits,
            fresh=claimed.deliveries == 1,
        )

    def connection(self) -> AbstractContextManager[Conn]:
        with self._lock:
            if self._pool is None:
                self._pool = connections.pool(self.dsn, self.role, max_size=self.max_size)
            return self._pool.connection()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=1)


class ThreadRuntime:
    """Sync bodies on ``BodyThreads``; a body is stopped cooperatively through its signal."""

    def __init__(
        self,
        size: int,
        finished: Finished,
        steps: StepWrites,
        stopping: threading.Event,
        marks: StartMarks,
        *,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.finished = finished
        self.steps = steps
        self.stopping = stopping
        self.marks = marks
        self.max_result_bytes = max_result_bytes
        self._lock = threading.Lock()
        self._threads: BodyThreads[InFlight] = BodyThreads(size, self._run)

    def submit(self, entry: InFlight) -> None:
        self._threads.submit(entry)

    def unstart(self, entry: InFlight) -> bool:
        with self._lock:
            if entry.started:
                return False
            entry.dropped = True
            return True

    def interrupt(self, entry: InFlight) -> None:
        pass  # a thread cannot be interrupted safely: the body polls its signal

    def abandon(self, entry: InFlight, cap: int) -> bool | None:
        return self._threads.abandon(entry, cap)

    @property
    def abandoned(self) -> int:
        """Abandoned body threads still running their hung body."""
        return self._threads.abandoned

    def shutdown(self) -> None:
        self._threads.shutdown()

    def resize(self, size: int, current: int) -> None:
        if size > current:
            self._threads.grow(size - current)
        elif size < current:
            self._threads.shrink(current - size)

    def _run(self, entry: InFlight) -> None:
        try:
            self._attempt(entry)
        except BaseException as exc:
            report_died(self.finished, entry, "the body thread", exc)
        if entry.abandoned:
            with contextlib.suppress(Exception):  # a logging filter that raises
                log.info(
                    "ujobs.worker.hung_returned: job %s (%s): its hung body returned; its "
                    "abandoned thread ends",
                    entry.claimed.id,
                    entry.claimed.name,
                )

    def _attempt(self, entry: InFlight) -> None:
        with self._lock:
            if entry.dropped or self.stopping.is_set():
                # Shutting down: a prefetched job must not start now; it is handed back.
                return
            entry.started = True
            entry.started_at = time.time()
        starting = self.marks.later(entry)
        if entry.signal.aborted or not (starting or self.marks.begin(entry)):
            self.finished(entry, BodyResult())
            return
        timeout = entry.definition.timeout_s
        if timeout is not None:
            entry.deadline = time.monotonic() + timeout
        result = run_body(
            entry.definition,
            entry.claimed,
            entry.signal,
            self.steps.runner(entry),
            max_result_bytes=self.max_result_bytes,
            starting=starting,
        )
        fault("attempt.before_settle")
        self.finished(entry, result)


class LoopRuntime:
    """``async def`` bodies as tasks on one event loop thread; a stopped body is cancelled."""

    def __init__(
        self,
        finished: Finished,
        steps: StepWrites,
        marks: StartMarks,
        *,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.finished = finished
        self.steps = steps
        self.marks = marks
        self.max_result_bytes = max_result_bytes
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ujobs-async", daemon=True
        )
        self._thread.start()

    def submit(self, entry: InFlight) -> None:
        entry.future = asyncio.run_coroutine_threadsafe(self._run(entry), self._loop)

    def unstart(self, entry: InFlight) -> bool:
        # True until the task ends: a task that already started is cancelled, and its body
        # ends with the signal's reason.
        return entry.future is not None and entry.future.cancel()

    def interrupt(self, entry: InFlight) -> None:
        if entry.future is not None:
            entry.future.cancel()

    def abandon(self, entry: InFlight, cap: int) -> bool | None:
        return None  # a task is cancelled at its timeout; it holds no thread of its own

    def shutdown(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()

    async def _run(self, entry: InFlight) -> None:
        try:
            starting = self.marks.later(entry)
            if starting is not None:
                begun = True  # the body says when its work starts (a queued start: no wait)
            elif self.marks.must_wait(entry):
                begun = await asyncio.to_thread(self.marks.begin, entry)
            else:
                begun = self.marks.begin(entry)
            if not begun:
                self.finished(entry, BodyResult())  # its lease was gone, or it was stopped
                return
            entry.started_at = time.time()
            runner = self.steps.runner(entry)
            result = await run_body_async(
                entry.definition,
                entry.claimed,
                entry.signal,
                runner,
                max_result_bytes=self.max_result_bytes,
                starting=starting,
            )
            fault("attempt.before_settle")
            self.finished(entry, result)
        except asyncio.CancelledError:
            raise  # stopped before it started: the stopper settles it
        except BaseException as exc:  # a SystemExit here would stop the whole event loop
            report_died(self.finished, entry, "the event loop's body task", exc)


class Runtimes:
    """The runtime of each attempt, chosen by the pool and the body's kind. ``open()`` builds
    them (idempotent), so a worker that is built but never run starts no thread or process, and
    one that never runs an ``async def`` body starts no event loop."""

    def __init__(
        self,
        *,
        pool: str,
        size: int,
        registry: Mapping[str, JobDefinition[Any, Any]],
        finished: Finished,
        steps: StepWrites,
        stopping: threading.Event,
        marks: StartMarks,
        app_spec: str | None,
        dsn: str,
        node: str = "",
        task_settings: TaskSettings | None = None,
        limits: TimeLimits = (None, None),
        max_tasks_per_child: int | None = None,
        max_memory_per_child_kib: int | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.node = node
        self.max_result_bytes = max_result_bytes
        self.limits = limits
        self.max_tasks_per_child = max_tasks_per_child
        self.max_memory_per_child_kib = max_memory_per_child_kib
        self.task_settings: TaskSettings = {} if task_settings is None else task_settings
        self.pool = pool
        self.size = size
        self.registry = registry
        self.finished = finished
        self.steps = steps
        self.stopping = stopping
        self.marks = marks
        self.app_spec = app_spec
        self.dsn = dsn
        self.processes: ProcessRuntime | None = None
        self.threads: ThreadRuntime | None = None
        self.loop: LoopRuntime | None = None
        self._opened = False

    def open(self) -> None:
        if self._opened:
            return
        self._opened = True
        if self.pool == "processes":
            self.processes = ProcessRuntime(
                self.size,
                self.finished,
                app_spec=self.app_spec,
                dsn=self.dsn,
                node=self.node,
                settings=self.task_settings,
                stopping=self.stopping,
                marks=self.marks,
                limits=self.limits,
                max_tasks_per_child=self.max_tasks_per_child,
                max_memory_per_child_kib=self.max_memory_per_child_kib,
                max_result_bytes=self.max_result_bytes,
            )
            return
        self.threads = ThreadRuntime(
            self.size,
            self.finished,
            self.steps,
            self.stopping,
            self.marks,
            max_result_bytes=self.max_result_bytes,
        )
        if any(d.is_async for d in self.registry.values()):
            self.loop = self.event_loop()

    def event_loop(self) -> LoopRuntime:
        """A new event-loop runtime for ``async def`` bodies (``open``, or a ``reload`` that
        brings the first one)."""
        return LoopRuntime(
            self.finished, self.steps, self.marks, max_result_bytes=self.max_result_bytes
        )

    def _of(self, entry: InFlight) -> Runtime:
        if self.processes is not None:
            return self.processes
        if entry.definition.is_async:
            assert self.loop is not None
            return self.loop
        assert self.threads is not None
        return self.threads

    def submit(self, entry: InFlight) -> None:
        self._of(entry).submit(entry)

    def slotted(self, entry: InFlight) -> bool:
        """Whether ``entry``'s body takes one of the ``size`` body slots (a thread or a pool
        child); an ``async def`` body on the event loop does not."""
        return self.processes is not None or not entry.definition.is_async

    def unstart(self, entry: InFlight) -> bool:
        return self._of(entry).unstart(entry)

    def interrupt(self, entry: InFlight) -> None:
        self._of(entry).interrupt(entry)

    def abandon(self, entry: InFlight, cap: int) -> bool | None:
        return self._of(entry).abandon(entry, cap)

    @property
    def abandoned(self) -> int:
        """Abandoned body threads still running their hung body."""
        return self.threads.abandoned if self.threads is not None else 0

    def resize(self, size: int) -> None:
        """Run ``size`` bodies at once: body threads or pool children are added now, or retire
        once free (a running body finishes first)."""
        if self.threads is not None:
            self.threads.resize(size, self.size)
        if self.processes is not None:
            self.processes.resize(size)
        self.size = size

    def pids(self) -> list[int]:
        """The processes bodies run in: the pool's children, else this process."""
        if self.processes is not None:
            return self.processes.pids()
        return [os.getpid()]

    def shutdown(self) -> None:
        for runtime in (self.processes, self.threads, self.loop):
            if runtime is not None:
                runtime.shutdown()
        self.steps.close()
