"""The worker: claim batches, run bodies, acknowledge in batches, and never lose a job.

Why it exists: this is where the durability promises are kept. One statement claims up to N ready
rows (``FOR UPDATE SKIP LOCKED``), counting the attempt and setting a lease (token + expiry on the
database clock). Bodies run on a thread pool, an event loop (``async def`` jobs) or a process pool.
Outcomes are written back in batches by one statement that carries each attempt's token, so a
write from an attempt that lost its lease changes nothing. Leases are renewed on their own
connection (``heartbeat.py``); expired leases of dead workers are rescued from the job rows by a
periodic sweep any worker runs; LISTEN/NOTIFY wakes an idle worker (``listener.py``), polling is
the floor.

Lifecycle: ``start()`` / ``stop()`` (idempotent; stop waits for in-flight work up to the shutdown
timeout, then hands back what is left with its attempt uncounted) and ``tick()`` for tests.

What it is not: the decision table for one attempt (``attempt.py``) or the CLI (``cli/worker.py``).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from ..clock import SYSTEM_CLOCK, Clock
from ..db import jobs as driver
from ..db import session
from ..errors import ConfigError, ErrorCode
from ..job import JobDefinition
from ..records import ClaimedJob, JobState, Settlement
from . import attempt as attempt_mod
from .attempt import BodyResult
from .body_threads import BodyThreads
from .child import child_init
from .config import WorkerConfig
from .heartbeat import Heartbeat
from .listener import ExtraChannel, Listener
from .outcome_batch import AckBatch
from .runtimes import BodyRunning
from .stopping import AttemptStopping, InFlight

log = logging.getLogger("ujobs.worker")

RESCUE_ERROR = (
    f"{ErrorCode.WORKER_LOST.value}: the lease ran out (worker killed, paused or cut off); rescued"
)
EXPIRE_ERROR = f"{ErrorCode.JOB_EXPIRED.value}: the job expired before it ran"
SWEEP_LIMIT = 1000


class Worker(BodyRunning, AttemptStopping):
    def __init__(
        self,
        dsn: str,
        registry: Mapping[str, JobDefinition[Any, Any]],
        config: WorkerConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        app_spec: str | None = None,
        worker_id: str | None = None,
        channels: Sequence[ExtraChannel] = (),
    ) -> None:
        self.dsn = dsn
        self.registry = dict(registry)
        self.config = config or WorkerConfig()
        self.clock = clock
        self.app_spec = app_spec
        if not self.registry:
            raise ConfigError(
                "the worker has no jobs to run",
                hint="pass -A with a module that declares @job functions",
            )
        if self.config.pool == "processes" and app_spec is None:
            raise ConfigError(
                "--pool processes needs -A",
                hint="child processes import the jobs from the -A module",
            )
        self.queues = tuple(self.config.queues or sorted({d.queue for d in self.registry.values()}))
        self.names = tuple(sorted(self.registry))
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.acks = AckBatch(
            threshold=self.config.capacity // 2, interval_s=self.config.ack_interval_s
        )
        self.counts = self.acks.counts
        self._lock = threading.Lock()
        self._inflight: dict[UUID, InFlight] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._hurry = threading.Event()
        self._stopped = threading.Event()
        self._loop_thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._executor: Executor | None = None
        self._threads: BodyThreads[InFlight] | None = None
        self._step_pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._aloop_thread: threading.Thread | None = None
        self._last_sweep = 0.0
        self._queue_turn = 0
        self._started = False
        self.heartbeat = Heartbeat(
            dsn,
            lease_s=self.config.lease_s,
            interval_s=self.config.heartbeat_interval_s,
            held=self._held_leases,
            on_lost=self._lease_lost,
            application_name=f"ujobs:worker:{self.id}:hb"[:63],
        )
        self.listener = Listener(
            dsn,
            queues=self.queues,
            on_ready=self._wake.set,
            on_cancel=self._cancel_notified,
            application_name=f"ujobs:worker:{self.id}:listen"[:63],
            channels=channels,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._ensure_runtime()
        self.heartbeat.start()
        self.listener.start()
        self._loop_thread = threading.Thread(target=self._loop, name="ujobs-claim", daemon=True)
        self._loop_thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop claiming at once; wait for bodies up to the shutdown timeout; hand back the rest
        uncounted. Idempotent; safe on a worker that never started."""
        if self._stopped.is_set():
            return
        self._stopping.set()
        self._wake.set()
        if self._loop_thread is not None:
            self._loop_thread.join()
        limit = self.config.shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        self._hand_back_unstarted()
        while time.monotonic() < deadline and not self._hurry.is_set():
            with self._lock:
                running = [e for e in self._inflight.values() if not e.settled]
            if not running:
                break
            self._flush(force=True)
            self._wake.wait(0.05)
            self._wake.clear()
        with self._lock:
            left = [e for e in self._inflight.values() if not e.settled]
        for entry in left:
            self._abort(entry, ErrorCode.WORKER_DRAINING, "the worker is shutting down")
            with self._lock:
                if entry.settled:
                    continue
                entry.settled = True
            self._record_settlement(
                entry,
                attempt_mod.settle(entry.definition, entry.claimed, BodyResult(), entry.signal),
            )
        self._flush(force=True)
        self.heartbeat.stop()
        self.listener.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._threads is not None:
            self._threads.shutdown()
        if self._aloop is not None:
            self._aloop.call_soon_threadsafe(self._aloop.stop)
            if self._aloop_thread is not None:
                self._aloop_thread.join(timeout=5)
            if not self._aloop.is_running():
                self._aloop.close()
        if self._conn is not None:
            self._conn.close()
        if self._step_pool is not None:
            self._step_pool.close(timeout=1)
        self._stopped.set()

    def request_stop(self) -> None:
        """Signal-handler safe: stop claiming now; ``stop()`` does the waiting."""
        self._stopping.set()
        self._wake.set()

    def hurry(self) -> None:
        """Cut a drain in progress short: hand back what still runs now."""
        self._hurry.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._inflight)

    def tick(self, *, timeout_s: float = 30.0) -> int:
        """One pass for tests: sweep, claim one batch, run it to the end, write the outcomes."""
        self._ensure_runtime()
        self._sweep(force=True)
        claimed = self._claim(self.config.capacity)
        deadline = time.monotonic() + timeout_s
        ids = {e.claimed.id for e in claimed}
        while time.monotonic() < deadline:
            self._check_deadlines()
            with self._lock:
                if not ids & self._inflight.keys():
                    break
            self._wake.wait(0.01)
            self._wake.clear()
        self._flush(force=True)
        return len(claimed)

    def _ensure_runtime(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                application_name=f"ujobs:worker:{self.id}"[:63],
                connect_timeout=5,
            )
            session.claims_commit_async(self._conn)
        if self._executor is None and self._threads is None:
            if self.config.pool == "processes":
                # spawn, not fork: a forked child would share this process's sockets (the
                # claim connection, an app's result pool) and copy locks held by its threads.
                self._executor = ProcessPoolExecutor(
                    max_workers=self.config.concurrency,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=child_init,
                    initargs=(self.app_spec, self.dsn),
                )
            else:
                self._threads = BodyThreads(self.config.concurrency, self._run_thread)
        if self._aloop is None and any(d.is_async for d in self.registry.values()):
            loop = asyncio.new_event_loop()
            self._aloop = loop
            self._aloop_thread = threading.Thread(
                target=loop.run_forever, name="ujobs-async", daemon=True
            )
            self._aloop_thread.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                more = self._pass()
            except psycopg.Error as exc:
                log.warning("ujobs.worker.db_error: %s", exc)
                if self._conn is not None:
                    self._conn.close()
                self._stopping.wait(1.0)
                try:
                    self._ensure_runtime()
                except psycopg.Error:
                    continue
                continue
            if more:
                continue
            with self._lock:
                pending = bool(self.acks)
                timed = any(e.deadline is not None for e in self._inflight.values())
            wait = self.config.poll_s
            if pending:
                wait = min(wait, self.config.ack_interval_s)
            if timed:
                wait = min(wait, 0.05)
            self._wake.wait(wait)

    def _pass(self) -> bool:
        """Write due outcomes and claim free slots in ONE transaction: one commit (one fsync)
        per cycle instead of two."""
        self._sweep()
        self._check_deadlines()
        batch = self._take_due()
        with self._lock:
            held = len(self._inflight)
        free = self.config.capacity - held
        want = 0
        if (
            free > 0
            and not self._stopping.is_set()
            and (not held or free >= max(1, self.config.capacity // 2))
        ):
            want = min(free, self.config.claim_batch)
        if not batch and not want:
            return False
        conn = self._connection()
        now = self.clock.sql_now()
        try:
            if batch and want:  # one round trip, one commit: outcomes durable, claims with them
                queue = self._next_queue()
                matched, rows = driver.job_settle_then_claim(
                    conn,
                    batch,
                    durable=not self.config.async_acks,
                    queue=queue,
                    names=self.names,
                    limit=want,
                    token=uuid.uuid4(),
                    lease_s=self.config.lease_s,
                    worker=self.id,
                    now=now,
                )
                if len(rows) < want and len(self.queues) > 1:
                    rows += self._claim_rows(want - len(rows), skip=queue)
            elif batch:
                with conn.transaction():
                    self._outcomes_durable(conn)
                    matched = driver.job_settle(conn, batch, now)
                rows = []
            else:  # claims alone: autocommit, asynchronous commit (see db/sql/session.sql)
                matched = set()
                rows = self._claim_rows(want)
        except psycopg.Error:
            self.acks.restore(batch)
            raise
        self.acks.written(batch, matched)
        self._start(rows)
        return want > 0 and len(rows) == want

    def _outcomes_durable(self, conn: psycopg.Connection[Any]) -> None:
        if not self.config.async_acks:
            session.outcomes_commit_durable(conn)

    def _sweep(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_sweep < self.config.sweep_s:
            return
        self._last_sweep = now
        conn = self._connection()
        rescued = driver.job_rescue(
            conn, limit=SWEEP_LIMIT, error=RESCUE_ERROR, now=self.clock.sql_now()
        )
        if rescued:
            self.counts.rescued += len(rescued)
            log.info("ujobs.worker.rescued: %d", len(rescued))
        driver.job_expire(conn, limit=SWEEP_LIMIT, error=EXPIRE_ERROR, now=self.clock.sql_now())

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._ensure_runtime()
        assert self._conn is not None
        return self._conn

    # ------------------------------------------------------------------ claim and dispatch

    def _claim(self, limit: int) -> list[InFlight]:
        return self._start(self._claim_rows(limit))

    def _next_queue(self) -> str:
        queue = self.queues[self._queue_turn % len(self.queues)]
        self._queue_turn += 1
        return queue

    def _claim_rows(self, limit: int, *, skip: str | None = None) -> list[ClaimedJob]:
        """Claim up to ``limit`` rows, queue by queue in turn (one indexed statement each); the
        starting queue rotates so no queue starves another."""
        rows: list[ClaimedJob] = []
        token = uuid.uuid4()
        for _ in range(len(self.queues)):
            if len(rows) >= limit:
                break
            queue = self._next_queue()
            if queue == skip:
                continue
            rows += driver.job_claim(
                self._connection(),
                queue=queue,
                names=self.names,
                limit=limit - len(rows),
                token=token,
                lease_s=self.config.lease_s,
                worker=self.id,
                now=self.clock.sql_now(),
            )
        return rows

    def _start(self, rows: list[ClaimedJob]) -> list[InFlight]:
        entries: list[InFlight] = []
        registry = self.registry
        with self._lock:
            for claimed in rows:
                entry = InFlight(claimed, registry[claimed.name])
                self._inflight[claimed.id] = entry
                entries.append(entry)
        self.counts.claimed += len(rows)
        started: list[InFlight] = []
        for entry in entries:
            if entry.claimed.expired:
                self._abort(entry, ErrorCode.JOB_EXPIRED, "expired before it ran")
                self._complete(entry, None, expired=True)
                continue
            self._dispatch(entry)
            started.append(entry)
        return started

    def _complete(
        self, entry: InFlight, result: BodyResult | None, *, expired: bool = False
    ) -> None:
        """Called on the body's thread when it returns (or at once for an expired job)."""
        with self._lock:
            already = entry.settled
            entry.settled = True
        if already:  # a timeout or a drain wrote this attempt's outcome already
            self._release(entry)
            return
        if expired:
            settlement: Settlement | None = Settlement(
                id=entry.claimed.id,
                token=entry.claimed.lease_token,
                state=JobState.CANCELLED,
                error=EXPIRE_ERROR,
            )
        else:
            assert result is not None
            settlement = attempt_mod.settle(entry.definition, entry.claimed, result, entry.signal)
            if settlement is None and entry.signal.code is ErrorCode.LEASE_LOST:
                log.warning(
                    "ujobs.worker.lease_lost: job %s (%s): its outcome was not written",
                    entry.claimed.id,
                    ErrorCode.LEASE_LOST.value,
                )
        self._record_settlement(entry, settlement)
        self._release(entry)  # only now: whoever sees the slot free also sees the outcome queued

    def _release(self, entry: InFlight) -> None:
        with self._lock:
            self._inflight.pop(entry.claimed.id, None)
        self._wake.set()

    def _take_due(self, *, force: bool = False) -> list[Settlement]:
        with self._lock:
            idle = not self._inflight
        return self.acks.take_due(force=force, idle=idle)

    def _flush(self, *, force: bool = False) -> int:
        batch = self._take_due(force=force)
        if not batch:
            return 0
        conn = self._connection()
        try:
            with conn.transaction():
                self._outcomes_durable(conn)
                matched = driver.job_settle(conn, batch, self.clock.sql_now())
        except psycopg.Error:
            self.acks.restore(batch)
            raise
        self.acks.written(batch, matched)
        return len(batch)
