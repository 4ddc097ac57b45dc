"""The scheduler: Celery beat's replacement. One leader fires periodic tasks; nothing fires twice.

Why it exists: beat is a single point of failure that double-fires when two run and forgets what
it missed while down. Here any number of scheduler processes run; one holds the lease row
(``leader.py``) and dispatches. Each round reads the clock ONCE (the injected clock's SQL
instant; with the system clock that is the database's ``now()``, so a host clock that runs ahead
neither fires early nor moves a watermark past the database's time) and plans every task from
its durable watermark (``cron.missed``: skip / run-once / all, bisection for the latest missed
occurrence), and fires each occurrence in ONE transaction that inserts its (task, occurrence)
row into ``x_scheduler_fires`` and its jobs: a second leader, a stale one, or a replayed round
finds the row already there and enqueues nothing. ``stop()`` waits out the round in flight before
giving the lease back, so a successor never races it. A task whose ``enqueue`` raises is logged
and keeps its watermark (it catches up by its policy once fixed); the other tasks still fire.
The scheduler's connection ends any transaction left idle past the lease (a paused leader's
half-done fire), so a successor is never blocked behind its row lock. The same process relays
the outbox. A task built with ``enqueue_in_fire=`` is handed the fire transaction's connection
explicitly, so what it writes commits (or rolls back) with the fire record. A ``source``
(``TaskSource``) is asked at the start of every round, on the round's connection, whether its
tasks changed (a schedule kept in tables, edited while the scheduler runs): when it answers with
a mapping, that mapping replaces the source's tasks from this round on; a task that leaves keeps
its watermark, so coming back it catches up by its policy (or by what the source's plan says).

What it is not: a worker (tasks only enqueue; workers run the jobs), nor SQL: the statements are
run by ``ujobs_bridge._internal.db.scheduling``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db import scheduling as store
from ujobs_bridge._internal.db import session
from ujobs_bridge._internal.db.connections import Reconnecting, Role
from ujobs_bridge._internal.db.scheduling import FireParams, watermarks
from ujobs_bridge._internal.faults import fault
from ujobs_bridge._internal.jobs.purge import PURGE_TASK_CRON, purge
from ujobs_bridge._internal.jobs.validation import seconds
from ujobs_bridge._internal.observe import metrics
from ujobs_bridge._internal.scheduling.leader import DEFAULT_GROUP, PgLeaseLeader
from ujobs_bridge._internal.scheduling.task import PeriodicTask, task
from ujobs_bridge._internal.service import Service
from ujobs_bridge.errors import ConfigError

__all__ = ["Scheduler", "SchedulerCounts", "TaskSource", "purge_task"]

log = logging.getLogger("ujobs.scheduler")

DEFAULT_TTL_S = 15.0
DEFAULT_INTERVAL_S = 1.0


class TaskSource(Protocol):
    """Periodic tasks kept outside the code (rows a user edits): asked once per round."""

    def refresh(
        self, conn: psycopg.Connection[Any], now: datetime
    ) -> Mapping[str, PeriodicTask] | None:
        """The source's tasks when they changed since the last call (all of them, not a
        difference), else None. Runs on the leader's round connection, outside a transaction."""
        ...


def purge_task() -> PeriodicTask:
    """The built-in hourly retention sweep every scheduler fires."""
    return task(
        "ujobs.purge.hourly",
        cron=PURGE_TASK_CRON,
        enqueue=lambda occurrence: [purge.configure(idempotency_key=occurrence.key).call()],
    )


@dataclass(slots=True)
class SchedulerCounts:
    rounds: int = 0
    fired: int = 0
    duplicates: int = 0
    jobs: int = 0
    sends: int = 0  # occurrences that sent through the fire's connection (Celery beat entries)
    catch_ups: int = 0
    failed: int = 0


class Scheduler(Service):
    """Fires ``tasks`` while it holds the lease of ``group``; ``tick()`` is one round."""

    def __init__(
        self,
        dsn: str,
        tasks: Mapping[str, PeriodicTask],
        *,
        clock: Clock = SYSTEM_CLOCK,
        ttl_s: float = DEFAULT_TTL_S,
        interval_s: float = DEFAULT_INTERVAL_S,
        holder: str | None = None,
        group: str = DEFAULT_GROUP,
        source: TaskSource | None = None,
    ) -> None:
        self.dsn = dsn
        self.tasks = dict(tasks)
        self.source = source
        self._sourced: dict[str, PeriodicTask] = {}
        self.clock = clock
        self.interval_s = seconds("scheduler interval", interval_s)
        ttl = seconds("scheduler lease", ttl_s)
        if ttl < 3 * self.interval_s:
            raise ConfigError(
                f"a {ttl}s lease cannot be renewed every {self.interval_s}s round reliably",
                hint="make the lease at least three rounds long",
            )
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.counts = SchedulerCounts()
        # The round's connection ends a transaction left idle past the lease (a paused leader's
        # half-done fire), so a successor is never blocked behind its row lock: a session limit
        # on a direct connection, and each fire transaction sets it again for itself (all that
        # holds behind PgBouncer). The leader election shares the connection.
        self.idle_ms = max(1000, int(ttl * 1000))
        self._conn = Reconnecting(
            dsn, Role(f"scheduler:{self.holder}", idle_in_transaction_ms=self.idle_ms)
        )
        self.leader = PgLeaseLeader(
            dsn, holder=self.holder, ttl_s=ttl, group=group, conn=self._conn
        )
        self._round_lock = threading.Lock()
        super().__init__("scheduler", interval_s=self.interval_s)

    # ------------------------------------------------------------------ lifecycle (``Service``)

    @property
    def connection(self) -> Reconnecting:
        """The scheduler's one connection, for a loop of the same process to share (the outbox
        relay of ``ujobs-bridge scheduler``); closed by ``stop()``."""
        return self._conn

    def _on_stop(self) -> None:
        """The round in flight has finished (``Service.stop`` joined it): now give the lease back."""
        with self._round_lock:
            self.leader.resign()
            self.leader.close()
            self._conn.close()

    def _on_error(self, exc: Exception) -> float:
        self._conn.reset()
        return super()._on_error(exc)

    def _now(self, conn: psycopg.Connection[Any]) -> datetime:
        """The round's one clock reading: the injected clock's SQL instant, else the database's."""
        pinned = self.clock.sql_now()
        if pinned is not None:
            return pinned
        return session.database_now(conn)

    # ------------------------------------------------------------------ one round

    def tick(self) -> int:
        """One round: renew or take the lease, then fire what is due. Returns occurrences fired."""
        with self._round_lock:
            if not self.leader.tick():
                return 0
            self.counts.rounds += 1
            with self._conn.using() as conn:
                return self._round(conn)

    def _round(self, conn: psycopg.Connection[Any]) -> int:
        now = self._now(conn)  # ONE reading for the whole round
        if self.source is not None:
            self._refresh(conn, now)
        marks = watermarks(conn)
        fired = 0
        for periodic in [*self.tasks.values(), *self._sourced.values()]:
            if not self.leader.is_leader:
                log.warning("ujobs.scheduler.trust_lapsed: stopping the round")
                break
            try:
                fired += self._dispatch(conn, periodic, marks.get(periodic.name), now)
            except psycopg.OperationalError:
                raise  # the connection is gone: the loop reconnects next round
            except Exception:
                self.counts.failed += 1
                log.exception("ujobs.scheduler.task_failed: %s keeps its watermark", periodic.name)
        return fired

    def _refresh(self, conn: psycopg.Connection[Any], now: datetime) -> None:
        """Take the source's tasks when they changed; a name the code declares stays the code's."""
        assert self.source is not None
        changed = self.source.refresh(conn, now)
        if changed is None:
            return
        kept: dict[str, PeriodicTask] = {}
        for name, periodic in changed.items():
            if name in self.tasks:
                log.warning("ujobs.scheduler.source_shadowed: %s is declared in code too", name)
                continue
            kept[name] = periodic
        log.info("ujobs.scheduler.source_changed: %d task(s) from the source", len(kept))
        self._sourced = kept

    def _dispatch(
        self,
        conn: psycopg.Connection[Any],
        periodic: PeriodicTask,
        watermark: datetime | None,
        now: datetime,
    ) -> int:
        plan = periodic.plan(watermark, now, grace=timedelta(seconds=2 * self.interval_s))
        result = plan.result
        if any(o.catch_up for o in plan.occurrences) or result.more:
            log.info(
                "ujobs.scheduler.catch_up: %s (%s) missed since %s: firing %d, more=%s, "
                "resolver calls %d",
                periodic.name,
                periodic.catch_up,
                result.oldest.isoformat() if result.oldest else "-",
                len(plan.occurrences),
                result.more,
                result.resolver_calls,
            )
        fired = 0
        for occurrence in plan.occurrences:
            fault("scheduler.before_fire")
            fault(f"scheduler.before_fire.{periodic.name}")  # a test's pick of one task's fires
            duplicate = False
            with conn.transaction():
                session.transaction_idle_limit(conn, self.idle_ms)
                specs = [request.spec() for request in periodic.requests(occurrence, conn)]
                fire = FireParams(
                    periodic.name, occurrence.at, occurrence.catch_up, tuple(s.id for s in specs)
                )
                if not store.scheduler_fire(conn, fire):
                    duplicate = True
                    raise psycopg.Rollback()  # also undoes what enqueue= wrote through conn
                enqueue_db.job_enqueue_many(conn, specs, self.clock.sql_now())
            if duplicate:
                self.counts.duplicates += 1
                continue
            fault("scheduler.after_enqueue")
            fired += 1
            self.counts.fired += 1
            self.counts.jobs += len(specs)
            self.counts.sends += 1 if periodic.sends_in_fire else 0
            self.counts.catch_ups += 1 if occurrence.catch_up else 0
            metrics.SCHEDULER_FIRES.labels(periodic.name).inc()
            if occurrence.catch_up:
                metrics.SCHEDULER_CATCH_UPS.labels(periodic.name).inc()
        store.scheduler_watermark_set(conn, periodic.name, plan.result.watermark)
        return fired
