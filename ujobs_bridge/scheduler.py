"""The scheduler: Celery beat's replacement. One leader fires periodic tasks; nothing fires twice.

Why it exists: beat is a single point of failure that double-fires when two run and forgets what
it missed while down. Here any number of scheduler processes run; one holds the lease row
(``leader.py``) and dispatches. Each round reads the injected clock ONCE, plans every task from
its durable watermark (``cron.missed``: skip / run-once / all, bisection for the latest missed
occurrence), and fires each occurrence in ONE transaction that inserts its (task, occurrence)
row into ``x_scheduler_fires`` and its jobs: a second leader, a stale one, or a replayed round
finds the row already there and enqueues nothing. ``stop()`` waits out the round in flight before
giving the lease back, so a successor never races it. The same process relays the outbox.

What it is not: a worker. Tasks only enqueue; workers run the jobs.
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
from typing import Any

import psycopg

from .clock import SYSTEM_CLOCK, Clock
from .drivers.postgres import driver
from .drivers.postgres.sql import q
from .errors import ConfigError
from .faults import fault
from .leader import DEFAULT_GROUP, PgLeaseLeader
from .task import PeriodicTask, task
from .validation import seconds

log = logging.getLogger("ujobs.scheduler")

DEFAULT_TTL_S = 15.0
DEFAULT_INTERVAL_S = 1.0


def purge_task() -> PeriodicTask:
    """The built-in hourly retention sweep every scheduler fires."""
    from .purge import PURGE_TASK_CRON, purge

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


class Scheduler:
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
    ) -> None:
        self.dsn = dsn
        self.tasks = dict(tasks)
        self.clock = clock
        self.interval_s = seconds("scheduler interval", interval_s)
        ttl = seconds("scheduler lease", ttl_s)
        if ttl < 3 * self.interval_s:
            raise ConfigError(
                f"a {ttl}s lease cannot be renewed every {self.interval_s}s round reliably",
                hint="make the lease at least three rounds long",
            )
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.leader = PgLeaseLeader(dsn, holder=self.holder, ttl_s=ttl, group=group)
        self.counts = SchedulerCounts()
        self._conn: psycopg.Connection[Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._round_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ujobs-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish the round in flight, then resign. Idempotent; safe before start."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._round_lock:
            self.leader.resign()
            self.leader.close()
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def request_stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except psycopg.Error as exc:
                log.warning("ujobs.scheduler.error: %s", exc)
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            self._stop.wait(self.interval_s)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn, autocommit=True, application_name=f"ujobs:scheduler:{self.holder}"[:63]
            )
        return self._conn

    # ------------------------------------------------------------------ one round

    def tick(self) -> int:
        """One round: renew or take the lease, then fire what is due. Returns occurrences fired."""
        with self._round_lock:
            if not self.leader.tick():
                return 0
            self.counts.rounds += 1
            now = self.clock.now()  # ONE reading for the whole round
            conn = self._connection()
            watermarks = dict(conn.execute(q("scheduler_watermarks")).fetchall())
            fired = 0
            for periodic in self.tasks.values():
                if not self.leader.is_leader:
                    log.warning("ujobs.scheduler.trust_lapsed: stopping the round")
                    break
                fired += self._dispatch(conn, periodic, watermarks.get(periodic.name), now)
            return fired

    def _dispatch(
        self,
        conn: psycopg.Connection[Any],
        periodic: PeriodicTask,
        watermark: datetime | None,
        now: datetime,
    ) -> int:
        plan = periodic.plan(watermark, now, grace=timedelta(seconds=2 * self.interval_s))
        if plan.result.resolver_calls > 20:
            log.info(
                "ujobs.scheduler.catch_up: %s resolved in %d calls",
                periodic.name,
                plan.result.resolver_calls,
            )
        fired = 0
        for occurrence in plan.occurrences:
            specs = [request.spec() for request in periodic.requests(occurrence)]
            with conn.transaction():
                row = conn.execute(
                    q("scheduler_fire"),
                    {
                        "task": periodic.name,
                        "occurrence_at": occurrence.at,
                        "catch_up": occurrence.catch_up,
                        "job_ids": [s.id for s in specs],
                    },
                ).fetchone()
                if row is None:
                    self.counts.duplicates += 1
                    continue
                driver.job_enqueue_many(conn, specs, self.clock.sql_now())
            fault("scheduler.after_enqueue")
            fired += 1
            self.counts.fired += 1
            self.counts.jobs += len(specs)
        conn.execute(
            q("scheduler_watermark_set"),
            {"task": periodic.name, "watermark": plan.result.watermark},
        )
        return fired


def last_fires(conn: psycopg.Connection[Any]) -> dict[str, tuple[datetime, bool, datetime]]:
    rows = conn.execute(q("scheduler_last_fires")).fetchall()
    return {r[0]: (r[1], bool(r[2]), r[3]) for r in rows}
