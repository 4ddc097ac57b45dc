"""Group commit of step results: the steps of many running bodies persisted by one statement.

Why it exists: ``step.run`` may return only once its result is durable, and a durable commit
costs a WAL flush. One commit per step made a job of five no-op steps run at a small fraction of
a plain job's rate. Here every body of a process hands its result to one ``GroupCommit`` and
waits; the results that gather while a commit is in flight are written together by the next
statement and committed once, and each waiting ``step.run`` is released only after the commit
that holds its own row (the classic group commit: a leader writes, followers queue behind it).

Gathering: the bodies one commit releases come back with their next steps a moment later, and
the first one back used to lead a batch alone while the rest queued behind it (half batches in
turn, each body waiting out about two commits a step). So a leader waits for the callers the
last commit released to write again, at most ``gather_max_s`` (2 ms) and half as long as that
commit took, and stops waiting as soon as they are all back. A lone body is back before it
leads, so it never waits; nothing else waits for company. The leader is a body thread itself:
there is no writer thread to hand results to, and when a leader is done it passes the lead to
the first result waiting.

Each result keeps its own answer: a result whose attempt lost its lease is not written (the
statement's lease check is per row) and only that ``step.run`` learns it; a batch the database
refuses for a reason of one result's own (a value jsonb cannot hold) is written again one
result at a time, so only that result fails; an infrastructure error (connection lost, server
restarting) is given to every result of the batch, and each caller retries its own write.

What it is not: the replay logic or the retry policy (``steps.py``), nor the SQL
(``db/steps.py``). Sleeps, waits and failed steps are rare and written directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db import steps as store
from ujobs_bridge._internal.db.connections import connection_state
from ujobs_bridge._internal.db.steps import StepResult

ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]

# Batches written at once. Postgres flushes the WAL one flush at a time, and a commit whose record
# came after a flush began waits for the next one: a second batch in flight did not overlap the
# first's flush, it split the bodies into two groups that each waited out both flushes: fewer
# results a statement and a slower step (``python -m bench --cells steps`` shows both).
IN_FLIGHT = 1
GATHER_MAX_S = 0.002  # the longest a batch waits for the bodies the last commit released ...
GATHER_SHARE = 0.5  # ... and at most this share of how long that commit took
MAX_ITEMS = 500  # results in one statement
MAX_BYTES = 8 * 1024 * 1024  # about this many characters of results in one statement


class _Waiter:
    """One result waiting for its commit. ``latch`` is held until the result is settled
    (``done``) or its thread is handed a ``batch`` to write (its own result first)."""

    __slots__ = ("batch", "done", "error", "latch", "result", "written")

    def __init__(self, result: StepResult) -> None:
        self.result = result
        self.done = False
        self.written = False
        self.error: BaseException | None = None
        self.batch: list[_Waiter] | None = None
        self.latch = threading.Lock()
        self.latch.acquire()

    @property
    def key(self) -> tuple[UUID, str]:
        return self.result.lease.run_id, self.result.name

    @property
    def size(self) -> int:
        return len(self.result.output_json) + len(self.result.name) + 160


class GroupCommit:
    """The step results of one process, written in batches; ``write`` is thread-safe. At most
    ``in_flight`` batches are written at once (default one: see ``IN_FLIGHT``); a result that
    finds them all busy queues, and the queue is the next batch."""

    def __init__(
        self,
        connection: ConnectionSource,
        *,
        in_flight: int = IN_FLIGHT,
        max_items: int = MAX_ITEMS,
        max_bytes: int = MAX_BYTES,
        gather_max_s: float = GATHER_MAX_S,
        gather_share: float = GATHER_SHARE,
    ) -> None:
        self.connection = connection
        self.in_flight = max(1, in_flight)
        self.max_items = max(1, max_items)
        self.max_bytes = max_bytes
        self.gather_max_s = max(0.0, gather_max_s)
        self.gather_share = max(0.0, gather_share)
        self.statements = 0  # batch statements run (tests and metrics read these)
        self.results = 0  # results those statements carried
        self._mutex = threading.Lock()
        self._arrived = threading.Condition(self._mutex)  # a result queued (a gathering leader)
        self._queue: list[_Waiter] = []
        self._leaders = 0  # threads writing a batch; while ``in_flight`` are, results queue
        self._away = 0  # callers the last commit released that have not written again since
        self._gathering = 0  # leaders waiting for them: meanwhile what arrives joins a batch
        self._commit_s = 0.0  # how long the last batch statement took (its commit included)

    def waiting(self) -> int:
        """Results queued behind the batches being written."""
        with self._mutex:
            return len(self._queue)

    def write(self, result: StepResult) -> bool:
        """Persist ``result`` and return once it is durable: True if this call wrote it, False
        if nothing was written (the lease is lost, or the row was already completed: the caller
        reads it back). Raises what the write raised for this result."""
        waiter = _Waiter(result)
        with self._mutex:
            if self._away:
                self._away -= 1
            if self._leaders < self.in_flight and not self._gathering:  # nothing is queued
                self._leaders += 1
                waiter.batch = [waiter]
            else:
                self._queue.append(waiter)
                if self._gathering and not self._away:
                    self._arrived.notify_all()  # the last one a gathering leader waits for
        if waiter.batch is None:
            waiter.latch.acquire()  # released once settled, or once handed a batch to write
        if waiter.batch is not None:
            self._lead(waiter.batch)
        assert waiter.done
        if waiter.error is not None:
            raise waiter.error
        return waiter.written

    # ---------------------------------------------------------------- the leader

    def _lead(self, batch: list[_Waiter]) -> None:
        """Write ``batch`` (this thread's own result first), topped up with what queued since it
        was handed over, settle it, then hand the queue to its first waiter as the next batch
        (or step down if nothing waits)."""
        with self._mutex:
            self._gather()
            self._fill(batch)
        started = time.monotonic()
        try:
            self._write(batch)
        except BaseException as exc:  # the leader's thread is ending (SystemExit, a signal)
            for waiter in batch:
                if not waiter.done:
                    waiter.error = exc if waiter is batch[0] else _ended(exc)
                    waiter.done = True
            raise
        finally:
            ahead: _Waiter | None = None
            with self._mutex:  # counted before any of them can be back to write again
                self._away = len(batch)  # its callers are back in their bodies
                self._commit_s = time.monotonic() - started
                if self._queue:
                    ahead = self._queue[0]
                    ahead.batch = []
                    self._fill(ahead.batch)
                else:
                    self._leaders -= 1
            for waiter in batch[1:]:
                waiter.latch.release()
            if ahead is not None:
                ahead.latch.release()  # it leads in this one's place

    def _gather(self) -> None:
        """Wait (under the mutex) for the callers the last commit released to write again, at
        most ``gather_max_s`` and ``gather_share`` of the time that commit took: the bodies a
        commit releases together then share the next one, instead of the first back leading a
        batch alone while the rest queue behind it (half batches in turn, each body waiting out
        about two commits a step). Meanwhile what arrives queues for this batch, even with a
        write slot free. A lone body is back before it leads: it never waits."""
        if not self._away:
            return
        deadline = time.monotonic() + min(self.gather_max_s, self._commit_s * self.gather_share)
        self._gathering += 1
        try:
            while self._away:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._arrived.wait(left)
        finally:
            self._gathering -= 1

    def _fill(self, batch: list[_Waiter]) -> None:
        """Move results from the head of the queue into ``batch`` (under the mutex): up to
        ``max_items`` and about ``max_bytes`` in all (at least one), at most one per (run, step
        name); the rest keep their places."""
        keys = {w.key for w in batch}
        size = sum(w.size for w in batch)
        rest: list[_Waiter] = []
        for waiter in self._queue:
            size += waiter.size
            full = batch and (len(batch) >= self.max_items or size > self.max_bytes)
            if full or waiter.key in keys:
                rest.append(waiter)
                continue
            keys.add(waiter.key)
            batch.append(waiter)
        self._queue = rest

    def _write(self, batch: list[_Waiter]) -> None:
        try:
            written = self._statement(batch)
        except Exception as exc:
            if len(batch) > 1 and not connection_state(exc):
                self._one_by_one(batch)  # find the result the database refuses
                return
            for waiter in batch:
                waiter.error = exc if waiter is batch[0] else _twin(exc)
                waiter.done = True
            return
        for waiter in batch:
            waiter.written = waiter.key in written
            waiter.done = True

    def _one_by_one(self, batch: list[_Waiter]) -> None:
        for waiter in batch:
            try:
                waiter.written = waiter.key in self._statement([waiter])
            except Exception as exc:
                waiter.error = exc
            waiter.done = True

    def _statement(self, batch: list[_Waiter]) -> set[tuple[UUID, str]]:
        with self.connection() as conn:
            written = store.steps_complete(conn, [w.result for w in batch])
        self.statements += 1
        self.results += len(batch)
        return written


def _twin(exc: Exception) -> Exception:
    """The error of a batch for another of its results: a database error is re-made (same class,
    message and SQLSTATE, the original as its cause) so that no two threads raise, and annotate,
    one exception object."""
    if not isinstance(exc, psycopg.Error):
        return exc
    twin = type(exc)(str(exc))
    twin.sqlstate = exc.sqlstate
    twin.__cause__ = exc
    return twin


def _ended(exc: BaseException) -> Exception:
    """What the other results of a batch learn when the thread writing it ended mid-way: an
    infrastructure error (their rows may or may not be in; a retry reads back what landed)."""
    return psycopg.OperationalError(f"the thread writing this step's batch ended: {exc!r}")
