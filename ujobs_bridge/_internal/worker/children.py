"""The process pool of ``--pool processes``: N spawned children, one body at a time each, each
watched by a keeper thread of its own in the parent.

Why it exists: ``concurrent.futures.ProcessPoolExecutor`` breaks as a whole when one child dies
(every job in it fails, every later submit raises ``BrokenProcessPool``) and cannot stop one
child. Here each child has its own pipe and its own keeper, so the parent knows which attempt
each child runs: a child that dies (the OOM killer's SIGKILL, a crash in C code) fails only its
own attempt (counted and retried like any failure, ``UJ_WORKER_LOST``) and is replaced; a body
past its timeout, cancelled, or whose lease was lost has its child killed and replaced. A body
that announced time limits (a Celery task's ``soft_time_limit``/``time_limit``) is signalled at
the soft one and its child killed at the hard one by its keeper (``pool_limits.py``). A child is also replaced, after its body returned and
before it takes another, once it ran ``max_tasks_per_child`` bodies or its resident memory
exceeds ``max_memory_per_child_kib`` (Celery's recycling; the job is not charged: its attempt
was already settled). The pool grows and shrinks while it runs (``resize``: pool_grow /
pool_shrink / --autoscale): a new keeper spawns its child; a retired one lets its body finish,
then closes its child and ends. Children die with the worker: the keeper that spawns a
child outlives it, and the child asks the kernel to kill it when that thread ends
(``PR_SET_PDEATHSIG``), with a watch on its parent as the fallback (``child.py``).

What it is not: the child's side (``child.py``), or where an attempt is settled (the ``finished``
callback, ``inflight.py``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from ujobs_bridge._internal.faults import fault
from ujobs_bridge._internal.jobs.error_text import error_text
from ujobs_bridge._internal.jobs.payload import DEFAULT_MAX_RESULT_BYTES
from ujobs_bridge._internal.observe import logs
from ujobs_bridge._internal.worker import pool_limits
from ujobs_bridge._internal.worker.attempt import BodyResult, RemoteJobError
from ujobs_bridge._internal.worker.child import (
    WORK_STARTS,
    TimeLimits,
    body_result_from_child,
    child_main,
)
from ujobs_bridge._internal.worker.inflight import Finished, InFlight, report_died
from ujobs_bridge._internal.worker.start_marks import StartMarks
from ujobs_bridge._internal.worker.steering import TaskSettings
from ujobs_bridge.errors import AttemptAborted, ErrorCode

log = logging.getLogger("ujobs.worker")

START_TIMEOUT_S = 120.0  # a child that has not loaded -A by then is killed and replaced
EXIT_GRACE_S = 5.0  # at shutdown, how long an idle child has to run its exit hooks


class ChildLost(Exception):
    """The child running an attempt died before answering."""


class Keeper:
    """One child process and the attempt it runs; used by its keeper thread only, except
    ``kill`` (any thread)."""

    def __init__(
        self,
        index: int,
        app_spec: str | None,
        dsn: str,
        node: str,
        limits: TimeLimits = (None, None),
    ) -> None:
        self.index = index
        self.app_spec = app_spec
        self.dsn = dsn
        self.node = node
        self.limits = limits
        self.process: BaseProcess | None = None
        self.conn: Connection | None = None
        self.current: InFlight | None = None
        self.ran = 0  # bodies the current child has run
        self.resident_kib = 0  # its resident memory after its last body

    @property
    def pid(self) -> int | None:
        process = self.process
        return process.pid if process is not None and process.is_alive() else None

    def ensure(self) -> tuple[BaseProcess, Connection]:
        """The live child, spawned (by this keeper's thread) if there is none."""
        if self.process is not None and self.conn is not None and self.process.is_alive():
            return self.process, self.conn
        self.discard()
        ours, theirs = multiprocessing.Pipe()
        process = multiprocessing.get_context("spawn").Process(
            target=child_main,
            args=(
                theirs,
                self.app_spec,
                self.dsn,
                self.node,
                os.getpid(),
                self.limits,
                logs.chosen(),
            ),
            name=f"ujobs-child-{self.index}",
            daemon=True,
        )
        process.start()
        theirs.close()
        self.process, self.conn = process, ours
        self.ran, self.resident_kib = 0, 0
        reply = self.receive(process, ours, deadline=time.monotonic() + START_TIMEOUT_S)
        if reply[0] != "ready":
            self.discard()
            raise RemoteJobError(f"the pool child could not start: {reply[1]}", retryable=True)
        return process, ours

    def receive(self, process: BaseProcess, conn: Connection, deadline: float | None = None) -> Any:
        """The child's next message; ``ChildLost`` if it dies first (or misses ``deadline``)."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = wait([conn, process.sentinel], timeout)
        if conn in ready:
            try:
                return conn.recv()
            except (EOFError, OSError):
                pass
        if not ready:
            self.kill()
        process.join(5)
        raise ChildLost(self.describe_end(process))

    def answer(
        self,
        process: BaseProcess,
        conn: Connection,
        starting: Callable[[], object] | None = None,
    ) -> Any:
        """The child's answer to the body it runs (as ``receive``). On the way, the body's
        limits noted by the child are kept: ``SIGUSR1`` at the soft one, and at the hard one the
        child is killed and ``HardLimitPassed`` raised (``pool_limits.py``); and when the body
        says its real work starts (``WORK_STARTS``), ``starting`` is called (its start queued)."""
        watch = pool_limits.Watch()
        while True:
            watch.due(time.monotonic(), process.pid, self.kill)
            at = watch.next_at()
            timeout = None if at is None else max(0.0, at - time.monotonic())
            ready = wait([conn, process.sentinel], timeout)
            if not ready:
                continue  # a limit is due
            if conn in ready:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    message = None
                if pool_limits.is_note(message):
                    watch.note(message, time.monotonic())
                    continue
                if message == WORK_STARTS:
                    if starting is not None:
                        starting()
                    continue
                if message is not None:
                    return message
            process.join(5)
            raise ChildLost(self.describe_end(process))

    @staticmethod
    def describe_end(process: BaseProcess) -> str:
        code = process.exitcode
        if code is None:
            return f"pool child {process.pid} stopped answering"
        if code < 0:
            return f"pool child {process.pid} was killed by {signal.Signals(-code).name}"
        return f"pool child {process.pid} exited with code {code}"

    def kill(self) -> None:
        process = self.process
        if process is not None and process.pid is not None and process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)

    def discard(self) -> None:
        """Forget the child (it is dead or being replaced); close our end of its pipe."""
        if self.conn is not None:
            self.conn.close()
        if self.process is not None:
            self.kill()
            self.process.join(5)
        self.process, self.conn = None, None

    def close(self) -> None:
        """Ask an idle child to exit (it runs its exit hooks); kill it if it does not."""
        if self.process is not None and self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(EXIT_GRACE_S)
        self.discard()


class ProcessRuntime:
    """Every body in a child; the parent keeps the deadline (``Stopper``) and a stopped body's
    child is killed (``interrupt``) and replaced before the next attempt."""

    def __init__(
        self,
        size: int,
        finished: Finished,
        *,
        app_spec: str | None,
        dsn: str,
        stopping: threading.Event,
        marks: StartMarks,
        node: str = "",
        settings: TaskSettings | None = None,
        limits: TimeLimits = (None, None),
        max_tasks_per_child: int | None = None,
        max_memory_per_child_kib: int | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.finished = finished
        self.max_result_bytes = max_result_bytes  # sent with each body: the child checks it
        self.stopping = stopping
        self.marks = marks
        self.settings: TaskSettings = {} if settings is None else settings  # sent with each body
        self.app_spec, self.dsn, self.node, self.limits = app_spec, dsn, node, limits
        self.max_tasks_per_child = max_tasks_per_child
        self.max_memory_per_child_kib = max_memory_per_child_kib
        self.recycled = 0  # children replaced for their task count or memory
        self.size = 0  # keepers wanted; resize() moves it, keepers follow
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[InFlight | None] = queue.SimpleQueue()
        self._keepers: list[Keeper] = []
        self._threads: list[threading.Thread] = []
        self._next_index = 0
        self.resize(size)

    def resize(self, size: int) -> None:
        """Keep ``size`` children: new keepers spawn theirs at once; a retired keeper takes the
        next free turn (a running body finishes first), closes its child and ends."""
        with self._lock:
            grow, self.size = size - self.size, size
            start: list[threading.Thread] = []
            for _ in range(max(0, grow)):
                keeper = Keeper(self._next_index, self.app_spec, self.dsn, self.node, self.limits)
                self._next_index += 1
                thread = threading.Thread(
                    target=self._keep, args=(keeper,), name=f"ujobs-keeper-{keeper.index}"
                )
                thread.daemon = True
                self._keepers.append(keeper)
                self._threads.append(thread)
                start.append(thread)
        for thread in start:
            thread.start()
        for _ in range(max(0, -grow)):
            self._queue.put(None)

    def pids(self) -> list[int]:
        """The live children's process ids (the ``stats`` command)."""
        with self._lock:
            keepers = list(self._keepers)
        return [pid for pid in (k.pid for k in keepers) if pid is not None]

    def submit(self, entry: InFlight) -> None:
        self._queue.put(entry)

    def unstart(self, entry: InFlight) -> bool:
        with self._lock:
            if entry.started:
                return False
            entry.dropped = True
            return True

    def interrupt(self, entry: InFlight) -> None:
        """Its attempt is over (timed out, cancelled, lease lost, handed back): kill its child."""
        with self._lock:
            keeper = next((k for k in self._keepers if k.current is entry), None)
        if keeper is not None:
            keeper.kill()

    def abandon(self, entry: InFlight, cap: int) -> bool | None:
        return None  # a hung body's child is killed at its timeout (``interrupt``)

    def shutdown(self) -> None:
        """Idle children exit after their hooks; busy ones (their attempts were handed back)
        are killed. Waits for the keepers a bounded time."""
        with self._lock:
            keepers, threads = list(self._keepers), list(self._threads)
        for _ in keepers:
            self._queue.put(None)
        for keeper in keepers:
            if keeper.current is not None:
                keeper.kill()
        deadline = time.monotonic() + EXIT_GRACE_S + 5
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _keep(self, keeper: Keeper) -> None:
        try:
            self._start(keeper)
            while (entry := self._queue.get()) is not None:
                with self._lock:
                    if entry.dropped or self.stopping.is_set():
                        continue  # handed back before it started
                    entry.started = True
                    entry.started_at = time.time()
                    keeper.current = entry
                try:
                    result = self._run(keeper, entry)
                except BaseException as exc:  # a keeper must outlive anything one attempt does
                    keeper.discard()
                    result = BodyResult(error=RemoteJobError(error_text(exc), retryable=True))
                finally:
                    with self._lock:
                        keeper.current = None
                try:
                    fault("attempt.before_settle")
                    self.finished(entry, result)
                except BaseException as exc:
                    report_died(self.finished, entry, "the pool child's keeper", exc)
                try:
                    self._recycle_if_due(keeper)
                except Exception:  # the next attempt spawns the child it needs
                    log.exception("ujobs.worker.child_recycle_failed: pool child %s", keeper.pid)
        finally:
            keeper.close()
            with self._lock:
                if keeper in self._keepers:
                    index = self._keepers.index(keeper)
                    del self._keepers[index], self._threads[index]

    def _recycle_if_due(self, keeper: Keeper) -> None:
        """Celery's ``--max-tasks-per-child`` / ``--max-memory-per-child``: after its body, a
        child past either limit exits (running its exit hooks) and a fresh one is spawned."""
        why = None
        most, memory = self.max_tasks_per_child, self.max_memory_per_child_kib
        if most is not None and keeper.ran >= most:
            why = f"it ran {keeper.ran} bodies (--max-tasks-per-child {most})"
        elif memory is not None and keeper.resident_kib > memory:
            why = f"it holds {keeper.resident_kib} KiB (--max-memory-per-child {memory})"
        if why is None or keeper.process is None:
            return
        log.info("ujobs.worker.child_recycled: pool child %s: %s; replacing it", keeper.pid, why)
        keeper.close()
        self.recycled += 1
        if not self.stopping.is_set():
            self._start(keeper)

    def _start(self, keeper: Keeper) -> None:
        try:
            keeper.ensure()
        except (ChildLost, RemoteJobError) as exc:  # tried again before the first attempt
            log.error("ujobs.worker.child_start: %s", exc)

    def _run(self, keeper: Keeper, entry: InFlight) -> BodyResult:
        if entry.signal.aborted:
            return BodyResult()
        with contextlib.suppress(ChildLost, RemoteJobError):  # raised again below, if at all
            keeper.ensure()  # a child to take the body first: its start is recorded after
        starting = self.marks.later(entry)  # a body that says when its work starts
        if entry.signal.aborted or not (starting or self.marks.begin(entry)):
            return BodyResult()  # stopped, or its lease was gone, before it started
        try:
            process, conn = keeper.ensure()
            if entry.definition.timeout_s is not None:
                entry.deadline = time.monotonic() + entry.definition.timeout_s
            conn.send((entry.claimed, self.settings or None, self.max_result_bytes))
            reply, keeper.resident_kib = keeper.answer(process, conn, starting)
            keeper.ran += 1
            return body_result_from_child(reply)
        except pool_limits.HardLimitPassed as passed:
            keeper.discard()
            if entry.signal.aborted:  # stopped for another reason first: the signal says why
                return BodyResult()
            return _hard_limit_result(entry, passed)
        except ChildLost as exc:
            keeper.discard()
            if entry.signal.aborted:  # we killed it: the signal says why
                return BodyResult()
            reason = f"the {exc} while running it; replaced"
            log.warning(
                "ujobs.worker.child_lost: job %s (%s): %s (%s)",
                entry.claimed.id,
                entry.claimed.name,
                reason,
                ErrorCode.WORKER_LOST.value,
            )
            return BodyResult(error=AttemptAborted(ErrorCode.WORKER_LOST, reason))


def _hard_limit_result(entry: InFlight, passed: pool_limits.HardLimitPassed) -> BodyResult:
    """The attempt of a body whose child was killed at its hard time limit: what the job's
    definition says the kill means (``on_time_limit``: a Celery task's FAILURE), else a failed
    attempt (``UJ_JOB_TIMEOUT``, retried per the job's policy)."""
    log.warning(
        "ujobs.worker.time_limit: job %s (%s): %s",
        entry.claimed.id,
        entry.claimed.name,
        passed,
    )
    hook = entry.definition.on_time_limit
    if hook is None:
        return BodyResult(error=AttemptAborted(ErrorCode.JOB_TIMEOUT, str(passed)))
    try:
        return BodyResult(error=hook(entry.claimed, passed.limit_s))
    except BaseException as exc:  # e.g. the database was away: the decision table sorts it
        return BodyResult(error=exc)
