"""The claim connection and what the claim loop runs on it: claims, outcome writes, the sweep.

Why it exists: the claim loop (``loop.py``) decides WHEN to claim and write; this says HOW, on one
connection (``ujobs:worker:<id>``, reopened after an error): claim queue by queue in turn so no
queue starves another, write a batch of outcomes (durable unless ``async_acks``), or both in one
round trip and one commit (with the starts of prefetched bodies, ``start_marks.py``), and
rescue expired leases (not before the database has been up again for a lease: see
``job_rescue``) and expire stale jobs. After writing a large batch it closes the connection, so
the worker's memory comes back (libpq keeps a buffer as large as the largest statement a
connection sent). The connection is
the worker's one working connection: the heartbeat and the node's presence share it
(``shared``; each of them, like each method here, holds it through ``using()`` for its
statements). Claims commit without waiting for the WAL flush: a session setting on a direct
connection, a ``set local`` in the claim's own transaction behind PgBouncer. The sweep also
reports due jobs whose name this worker does not declare: never claimed (a worker that declares
the name may come), logged as an error once per (queue, name) per ``unregistered_log_every_s``,
dead-lettered only if ``unregistered_dead_after_s`` is set.

What it is not: the SQL (``db/leases.py`` and ``db/unclaimed.py`` run its statements) or the
decision of an outcome (``attempt.py``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.clock import Clock
from ujobs_bridge._internal.db import claim_table, nodes, session
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db import unclaimed as unclaimed_db
from ujobs_bridge._internal.db.connections import (
    Reconnecting,
    Role,
    connection_state,
    sessions_pooled,
)
from ujobs_bridge._internal.observe import metrics
from ujobs_bridge._internal.worker import fleet
from ujobs_bridge._internal.worker.config import WorkerConfig
from ujobs_bridge._internal.worker.outcome_batch import WorkerCounts, size_of
from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.records import ClaimedJob, Settlement

log = logging.getLogger("ujobs.worker")

Lease = tuple[UUID, UUID]  # (job id, lease token)

RESCUE_ERROR = (
    f"{ErrorCode.WORKER_LOST.value}: the lease ran out (worker killed, paused or cut off); rescued"
)
UNSTARTED_ERROR = (
    f"{ErrorCode.WORKER_LOST.value}: the lease ran out (worker killed, paused or cut off) before "
    "the job's body started; handed back uncounted"
)
EXPIRE_ERROR = f"{ErrorCode.JOB_EXPIRED.value}: the job expired before it ran"
UNREGISTERED_ERROR = (
    f"{ErrorCode.TASK_UNREGISTERED.value}: no worker that consumed this queue declares task "
    "'{name}'; dead-lettered after waiting (unregistered_dead_after_s)"
)
SWEEP_LIMIT = 1000
# The worker vacuums the claim table (``db/claim_table.py``) once it has claimed as many jobs as
# the table holds (its live rows, as the statistics count them) and at least this many: its index
# then grows by about twice that between vacuums (a few pages at the least), whatever the claim
# rate, and a vacuum (which reads the whole table and index) costs about as much as the claims
# since the last one, never more, however large a backlog is. Counted per worker: a fleet of N
# vacuums about once per that many claims of all N together. It reads the count every this
# many claims. At 1,000 claims/s or less autovacuum (naptime 1 s) comes about as often.
CLAIM_VACUUM_EVERY = 1000
# A written batch this large (``outcome_batch.size_of``) closes the claim connection afterwards,
# so the memory its statement took is given back (``Claims._let_go_if_large``); one reconnect
# costs far less than writing that much.
LARGE_STATEMENT = 8 * 1024 * 1024


def age(seconds: float) -> str:
    """A short age for a log line: 45s, 2m, 3h, 2d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


class Claims:
    def __init__(
        self,
        dsn: str,
        *,
        worker_id: str,
        queues: tuple[str, ...],
        names: tuple[str, ...],
        config: WorkerConfig,
        clock: Clock,
        counts: WorkerCounts,
        fleet_size: Callable[[], int] = lambda: 1,
        wake_channel: str | None = None,
        hand_offs: nodes.HandOffs | None = None,
        hand_offs_live: Callable[[], bool] = lambda: False,
    ) -> None:
        """``fleet_size``: how many workers are live (``Presence.fleet``); the sweep, which
        works for all of them, is spread over them (``fleet.py``). ``wake_channel``: the channel
        this worker's listener listens on alone, named in its marks (``mark_waiting``).
        ``hand_offs``: what its marks offer for hand-offs (0027), while ``hand_offs_live()``
        says its listen session holds the lock key and hears the hand-off channel."""
        self.worker_id = worker_id
        self.wake_channel = wake_channel
        self._hand_offs = hand_offs
        self.hand_offs_live = hand_offs_live
        self.queues = queues
        self.names = names
        self.config = config
        self.clock = clock
        self.counts = counts
        self._conn = Reconnecting(dsn, Role(f"worker:{worker_id}"))
        self._prepared: psycopg.Connection[Any] | None = None  # session settings applied
        self._queue_turn = 0
        self.fleet_size = fleet_size
        self._sweeps = fleet.Chore(config.sweep_s)
        self._unregistered_logged: dict[tuple[str, str], float] = {}  # (queue, name): monotonic
        self._claimed_since_vacuum = 0
        self._vacuum_after = CLAIM_VACUUM_EVERY  # claims before the next look at the table
        self._may_vacuum: tuple[psycopg.Connection[Any], bool] | None = None  # (conn, allowed)
        self._grace_seen: datetime | None = None  # the server start the sweep last reported

    @property
    def _pooled(self) -> bool:
        """No session settings (set local per claim): behind a pooler, declared or met."""
        return sessions_pooled()

    @property
    def shared(self) -> Reconnecting:
        """The connection itself, for the loops that share it (heartbeat, presence)."""
        return self._conn

    def connection(self) -> psycopg.Connection[Any]:
        """The claim connection; claims on it commit asynchronously (db/sql/session.sql). Use
        it inside ``self.shared.using()``."""
        conn = self._conn.get()
        if conn is not self._prepared:
            if not self._pooled:
                session.claims_commit_async(conn)
            self._prepared = conn
        return conn

    def _claim_on(
        self, conn: psycopg.Connection[Any], params: leases_db.ClaimParams
    ) -> list[ClaimedJob]:
        return leases_db.job_claim(conn, params, pooled=self._pooled)

    def reset(self) -> None:
        """After an error: the next use opens a fresh connection."""
        self._conn.reset()

    close = reset

    def _next_queue(self) -> str:
        queue = self.queues[self._queue_turn % len(self.queues)]
        self._queue_turn += 1
        return queue

    def _claim(
        self, queue: str, limit: int, token: uuid.UUID, start: int = 0
    ) -> leases_db.ClaimParams:
        return leases_db.ClaimParams(
            queue=queue,
            names=self.names,
            limit=limit,
            token=token,
            lease_s=self.config.lease_s,
            worker=self.worker_id,
            now=self.clock.sql_now(),
            start=max(0, start),
        )

    def claim(self, limit: int, *, start: int = 0, skip: str | None = None) -> list[ClaimedJob]:
        """Claim up to ``limit`` rows, queue by queue in turn (one indexed statement each); the
        starting queue rotates so no queue starves another. The first ``start`` rows are
        recorded as started (``ClaimedJob.started``: free body slots take them at once)."""
        rows: list[ClaimedJob] = []
        token = uuid.uuid4()
        with self._conn.using():
            for _ in range(len(self.queues)):
                if len(rows) >= limit:
                    break
                queue = self._next_queue()
                if queue == skip:
                    continue
                begun = sum(1 for r in rows if r.started)
                rows += self._claim_on(
                    self.connection(),
                    self._claim(queue, limit - len(rows), token, start - begun),
                )
        return rows

    def start(self, leases: list[Lease]) -> set[UUID]:
        """Record that the bodies of these (job id, token) start now (committed asynchronously,
        as claims are); returns the ids whose lease is still there."""
        with self._conn.using():
            return leases_db.job_start(self.connection(), leases, pooled=self._pooled)

    def write(self, batch: list[Settlement], starts: Sequence[Lease] = ()) -> set[UUID]:
        """Write a batch of outcomes in one transaction (with ``starts``: bodies that started,
        ``start_marks.py``); returns the ids whose lease matched."""
        with self._conn.using():
            conn = self.connection()
            with conn.transaction():
                leases_db.claim_plans(conn)
                if not self.config.async_acks:
                    session.outcomes_commit_durable(conn)
                matched = leases_db.job_settle(conn, batch, self.clock.sql_now(), starts=starts)
        self._let_go_if_large(batch)
        return matched

    def write_then_claim(
        self, batch: list[Settlement], want: int, *, start: int = 0, starts: Sequence[Lease] = ()
    ) -> tuple[set[UUID], list[ClaimedJob]]:
        """One round trip, one commit: the outcomes durable (with ``starts``, as ``write``),
        the claims with them."""
        queue = self._next_queue()
        with self._conn.using():
            matched, rows = leases_db.job_settle_then_claim(
                self.connection(),
                batch,
                self._claim(queue, want, uuid.uuid4(), start),
                durable=not self.config.async_acks,
                starts=starts,
            )
            if len(rows) < want and len(self.queues) > 1:
                begun = sum(1 for r in rows if r.started)
                rows += self.claim(want - len(rows), start=start - begun, skip=queue)
        self._let_go_if_large(batch)
        return matched, rows

    def _let_go_if_large(self, batch: list[Settlement]) -> None:
        """After a written batch of ``LARGE_STATEMENT`` bytes or more, close the connection (the
        next statement opens a fresh one): libpq keeps its output buffer as large as the largest
        statement it sent, for as long as the connection lives."""
        if sum(size_of(s) for s in batch) >= LARGE_STATEMENT:
            self._conn.reset()

    def sweep(self, *, force: bool = False) -> int:
        """Rescue the jobs of expired leases and expire stale jobs, every ``sweep_s`` (alone;
        in a fleet of N, every N ``sweep_s`` or so, jittered: the fleet sweeps every
        ``sweep_s``, see ``fleet.py``). Returns how many jobs it rescued (0 when not due)."""
        now = time.monotonic()
        if not force and not self._sweeps.due(now, self.fleet_size()):
            return 0
        self._sweeps.ran(now)
        with self._conn.using():
            conn = self.connection()
            self._report_grace(conn)
            rescued = leases_db.job_rescue_jobs(
                conn,
                limit=SWEEP_LIMIT,
                error=RESCUE_ERROR,
                unstarted_error=UNSTARTED_ERROR,
                now=self.clock.sql_now(),
                lease_s=self.config.lease_s,
            )
            if rescued:
                unstarted = sum(1 for r in rescued if not r.started)
                self.counts.rescued += len(rescued)
                metrics.LEASE_RESCUES.inc(len(rescued))
                log.info(
                    "ujobs.worker.rescued: %d (%d never started: handed back uncounted)",
                    len(rescued),
                    unstarted,
                )
            leases_db.job_expire(
                conn, limit=SWEEP_LIMIT, error=EXPIRE_ERROR, now=self.clock.sql_now()
            )
            self._dead_unregistered(conn)
            self._report_unregistered(conn, now)
        return len(rescued)

    def _report_grace(self, conn: psycopg.Connection[Any]) -> None:
        """Once per start of the server, while it is recent: say until when the leases that ran
        out while it was down are held (no lease is rescued before it has had its length of
        uptime again), so an operator reading the log knows why nothing was rescued yet."""
        up_since, db_now = leases_db.outage_grace(conn)
        if up_since == self._grace_seen:
            return
        self._grace_seen = up_since
        held_until = up_since.timestamp() + self.config.lease_s
        if db_now.timestamp() < held_until:
            log.info(
                "ujobs.worker.outage_grace: the database is up since %s; a lease that ran out "
                "is rescued only once the database has been up for that lease's length (%gs "
                "for this worker's), so its worker can come back and write what it kept",
                up_since.isoformat(timespec="seconds"),
                self.config.lease_s,
            )

    def tidy(self, claimed: int) -> None:
        """After ``claimed`` jobs were claimed (outside any transaction): once this worker has
        claimed as many jobs as the claim table holds (``CLAIM_VACUUM_EVERY`` at the least),
        vacuum it so its index reuses the pages the claims emptied (``db/claim_table.py``).
        Skipped at once if a vacuum of it is running; never tried by a role that may not vacuum
        it (autovacuum alone keeps it then). A vacuum the server refuses for another reason
        is logged once and not tried again on that connection; a lost connection is the claim
        loop's to handle, as after any statement of it."""
        self._claimed_since_vacuum += claimed
        if self._claimed_since_vacuum < self._vacuum_after:
            return
        with self._conn.using():
            conn = self.connection()
            if self._may_vacuum is None or self._may_vacuum[0] is not conn:
                self._may_vacuum = (conn, claim_table.vacuum_allowed(conn))
            if not self._may_vacuum[1]:
                self._claimed_since_vacuum = 0
                return
            live = claim_table.live_rows(conn)
            if self._claimed_since_vacuum < live:
                self._vacuum_after = self._claimed_since_vacuum + CLAIM_VACUUM_EVERY
                return  # a backlog larger than the claims so far: read the count again later
            try:
                claim_table.vacuum(conn)
            except psycopg.Error as exc:
                if connection_state(exc) or conn.closed:
                    raise
                log.warning(
                    "ujobs.worker.claim_table_vacuum_failed: %s (left to autovacuum on this "
                    "connection; the claims are not affected)",
                    exc,
                )
                self._may_vacuum = (conn, False)
            self._claimed_since_vacuum = 0
            self._vacuum_after = CLAIM_VACUUM_EVERY

    @property
    def hand_offs(self) -> nodes.HandOffs | None:
        """What the marks offer for hand-offs now: None while the listen session is not ready
        for them (then marks are written unarmed and inserts only wake this worker)."""
        if self._hand_offs is None or not self.hand_offs_live():
            return None
        return replace(self._hand_offs, names=self.names, lease_s=self.config.lease_s)

    def mark_waiting(self) -> tuple[bool, int]:
        """Mark this worker's queues as waited for (migration 0021: an insert into a marked
        queue notifies, 0025: this worker's own channel, 0027: armed for a hand-off):
        (registered, marks added), as ``nodes.queue_waiting_mark``."""
        with self._conn.using():
            return nodes.queue_waiting_mark(
                self.connection(),
                self.worker_id,
                self.queues,
                self.clock.sql_now(),
                self.wake_channel,
                self.hand_offs,
            )

    def arm(self) -> int:
        """Arm this worker's marks for a hand-off again (a hand-off disarmed them)."""
        with self._conn.using():
            return nodes.queue_waiting_arm(self.connection(), self.worker_id)

    def handed_unknown(self, held: set[UUID]) -> list[ClaimedJob]:
        """Unstarted hand-offs to this worker that it does not hold (``held``): missed
        notifications, found by the lease rows the inserts wrote, their leases renewed."""
        with self._conn.using():
            return leases_db.job_handed_unknown(
                self.connection(),
                self.worker_id,
                sorted(held),
                self.clock.sql_now(),
                self.config.lease_s,
            )

    def unmark_waiting(self) -> None:
        """Remove this worker's marks: inserts into its queues no longer notify for it."""
        with self._conn.using():
            nodes.queue_waiting_unmark(self.connection(), self.worker_id)

    def _report_unregistered(self, conn: psycopg.Connection[Any], now: float) -> None:
        """Log, in Celery's words plus the fix, the due jobs this worker will never claim."""
        found = unclaimed_db.job_unregistered(
            conn,
            unclaimed_db.UnregisteredParams(
                queues=self.queues,
                names=self.names,
                after_s=self.config.unregistered_after_s,
                scan=SWEEP_LIMIT,
                now=self.clock.sql_now(),
            ),
        )
        every = self.config.unregistered_log_every_s
        logged = self._unregistered_logged
        for key in [k for k, at in logged.items() if now - at >= every]:
            del logged[key]  # bounded by the names seen within one window
        for b in found:
            if (b.queue, b.name) in logged:
                continue
            logged[(b.queue, b.name)] = now
            log.error(
                "Received unregistered task of type %r on queue %r: %d waiting, oldest %s; "
                "deploy a worker that declares it, or `ujobs-bridge jobs cancel` them [%s]",
                b.name,
                b.queue,
                b.jobs,
                age(b.oldest_s),
                ErrorCode.TASK_UNREGISTERED.value,
            )

    def _dead_unregistered(self, conn: psycopg.Connection[Any]) -> None:
        after = self.config.unregistered_dead_after_s
        if after is None:
            return
        for queue in self.queues:
            dead = unclaimed_db.job_dead_unregistered(
                conn,
                unclaimed_db.DeadUnregisteredParams(
                    queue=queue,
                    names=self.names,
                    after_s=after,
                    limit=SWEEP_LIMIT,
                    error=UNREGISTERED_ERROR,
                    now=self.clock.sql_now(),
                ),
            )
            for name in sorted({n for _, n in dead}):
                count = sum(1 for _, n in dead if n == name)
                log.error(
                    "Dead-lettered %d job(s) of unregistered task %r on queue %r after %ss [%s]",
                    count,
                    name,
                    queue,
                    f"{after:g}",
                    ErrorCode.TASK_UNREGISTERED.value,
                )
