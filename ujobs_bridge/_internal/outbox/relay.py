"""The outbox relay: publish staged rows as jobs, in order, and mark them published.

Why it exists: rows staged in a caller's transaction must become jobs exactly once and in the
order they were committed. In ONE database the relay inserts the jobs and marks the rows in one
transaction: no window at all. Across databases it publishes row by row, in id order, then marks
the batch (at least once): a row published but not marked (a crash between the two) is
published again on restart with the SAME job id, and the insert does nothing when that id is
already there, live or finished. Only a job that finished AND was purged before the restart
can run twice; keep the purge age far above any relay outage. A failure stops the batch, so a
later row never overtakes an earlier one. ``stop()`` finishes the batch in flight (the SIGTERM
drain).

It keeps one source connection (reopened after an error) rather than one per pass, or shares
one (``connection=``: the scheduler's, in ``ujobs-bridge scheduler``). Its lock is an advisory
lock scoped to the batch's transaction, so the relay works through PgBouncer's transaction
pooling.

What it is not: staging (``staging.py``), nor SQL: the statements run in
``ujobs_bridge._internal.db.outbox``.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db import outbox as store
from ujobs_bridge._internal.db.outbox import StagedRow
from ujobs_bridge._internal.faults import fault
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.service import Service

log = logging.getLogger("ujobs.outbox")

DEFAULT_BATCH = 500
# The relay runs its own transaction on the source (lock, claim, publish, mark as one).
SOURCE_ROLE = connections.Role("outbox")
TARGET_ROLE = connections.Role("outbox:publish")


class OutboxRelay(Service):
    """Publishes ``source_dsn``'s outbox into ``target_dsn`` (default: the same database)."""

    def __init__(
        self,
        source_dsn: str,
        *,
        target_dsn: str | None = None,
        batch: int = DEFAULT_BATCH,
        interval_s: float = 0.5,
        clock: Clock = SYSTEM_CLOCK,
        connection: connections.Reconnecting | None = None,
    ) -> None:
        self.source_dsn = source_dsn
        self._source = connection or connections.Reconnecting(source_dsn, SOURCE_ROLE)
        self._owned = connection is None
        self.target_dsn = target_dsn
        self.batch = validation.positive_int("outbox relay batch", batch, maximum=100_000)
        self.interval_s = validation.seconds("outbox relay interval", interval_s)
        self.clock = clock
        self.published = 0
        super().__init__("outbox", interval_s=self.interval_s)

    @property
    def cross_database(self) -> bool:
        return self.target_dsn is not None and self.target_dsn != self.source_dsn

    def _pass(self) -> float:
        # A full batch means more may be waiting: go on at once. ``stop()`` (the SIGTERM drain)
        # lets the batch in hand finish and be marked, then returns.
        return 0.0 if self.tick() >= self.batch else self.interval_s

    def _on_error(self, exc: Exception) -> float:
        if isinstance(exc, psycopg.Error) and not self._source.open:
            self._source.reset()
        return super()._on_error(exc)

    def _on_stop(self) -> None:
        if self._owned:
            self._source.close()

    def tick(self) -> int:
        """Publish one batch; returns how many rows became jobs."""
        with self._source.using() as source:
            with source.transaction():
                if not store.outbox_relay_lock(source):
                    return 0  # another relay is publishing
                rows = store.outbox_claim(source, self.batch)
                if not rows:
                    return 0
                if not self.cross_database:
                    specs = [r.spec for r in rows]
                    enqueue_db.job_enqueue_many(source, specs, self.clock.sql_now())
                    fault("outbox.after_publish")
                    store.outbox_mark(source, [r.outbox_id for r in rows])
                    published = len(rows)
                else:
                    published = self._publish_across(source, rows)
            self.published += published
            return published

    def _publish_across(self, source: psycopg.Connection[Any], rows: list[StagedRow]) -> int:
        assert self.target_dsn is not None
        done: list[int] = []
        try:
            with connections.connect(self.target_dsn, TARGET_ROLE) as target:
                for row in rows:
                    store.outbox_publish(target, row.spec, self.clock.sql_now())
                    fault("outbox.after_publish")
                    done.append(row.outbox_id)
        except psycopg.Error as exc:
            log.warning(
                "ujobs.outbox.stopped: row %s failed, the batch stops there: %s",
                rows[len(done)].outbox_id,
                exc,
            )
        if done:
            store.outbox_mark(source, done)
        return len(done)
