"""Lease renewal for every job a worker holds, on the worker's working connection.

Why it exists: a lease is the only thing that stops another worker from rescuing a job that is
still running, so renewals must not queue behind job bodies for a pooled connection (pool
exhaustion would turn into silent lease loss, then duplicates). They run on the connection the
claim loop and the node's presence share (``Reconnecting.using``): they wait for one short
claim-loop statement, never for a body or a step write, and the worker holds one connection
fewer. Nor do they wait for a long statement: while a large outcome batch is being written
(``OutcomeBatch.writing_large``), or when the shared connection stays busy for half an interval,
the renewal runs on a spare connection of its own (``ujobs:worker:<id>:renew``), opened for it
and closed at the next renewal that finds the shared one free; so a write of large results,
however slow, never lets the leases of the jobs behind it run out. One statement renews every
held lease at once; a lease that no longer matches (cancelled, or taken over after this process was
paused) is reported so the body is stopped. If renewals keep failing, the worker stops trusting
its leases at ``last good renewal start + lease - margin`` even without reaching the database
(any failure of a renewal counts, not only a database error): it cannot tell a database that is
down (no lease runs out then, nor within a lease of its return) from being cut off, so the
stopper signals the bodies and still writes, fenced, what they end with.

A ``Service`` (``service.py``): ``stop()`` waits for a renewal in flight; the shared connection
is closed by its owner (the claim loop's ``Claims``), the spare when the heartbeat stops.

What it is not: the rescuer. Expired leases are recovered from the job rows by any worker's sweep.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db.connections import Busy, Reconnecting
from ujobs_bridge._internal.faults import fault
from ujobs_bridge._internal.service import Service
from ujobs_bridge.records import JobState

log = logging.getLogger("ujobs.heartbeat")

TRUST_MARGIN_S = 1.0


class Heartbeat(Service):
    """Renews every held lease each ``interval_s`` (the first renewal one interval after start)."""

    def __init__(
        self,
        conn: Reconnecting,
        *,
        lease_s: float,
        interval_s: float,
        held: Callable[[], Sequence[tuple[UUID, UUID]]],
        on_lost: Callable[[UUID, JobState | None], None],
        spare: Reconnecting | None = None,
        writing_large: Callable[[], bool] = lambda: False,
    ) -> None:
        """``spare``: the connection renewals use while ``conn`` is held by a long statement
        (``writing_large()`` says one is running); ``None``: they wait for ``conn``."""
        self.lease_s = lease_s
        self.interval_s = interval_s
        self.held = held
        self.on_lost = on_lost
        self.writing_large = writing_large
        self._conn = conn
        self._spare = spare
        self._last_ok_start = time.monotonic()
        super().__init__("heartbeat", interval_s=interval_s, wait_first=True)

    def _on_start(self) -> None:
        self._last_ok_start = time.monotonic()

    def tick(self) -> None:
        """Renew every held lease once; report the ones that no longer match."""
        leases = list(self.held())
        started = time.monotonic()
        if not leases:
            self._last_ok_start = started
            return
        fault("heartbeat.tick")
        used = self._conn
        try:
            try:
                if self._spare is not None and self.writing_large():
                    raise Busy("a large outcome batch is being written")
                wait = self.interval_s if self._spare is None else self.interval_s / 2
                with self._conn.using(wait_s=wait) as conn:
                    lost, states = self._renew(conn, leases)
                if self._spare is not None and self._spare.open:
                    self._spare.close()  # the shared connection is free again
            except Busy:
                if self._spare is None:
                    raise
                used = self._spare  # the shared connection is held by a long statement
                with self._spare.using() as conn:
                    lost, states = self._renew(conn, leases)
        except Exception as exc:  # any failure: renew again next time, trust the leases less
            if isinstance(exc, psycopg.Error):
                log.warning("ujobs.heartbeat.failed: %s", exc)
            else:
                log.exception("ujobs.heartbeat.failed")
            if not isinstance(exc, Busy):  # a claim statement still holds it: not broken
                used.reset()
            if time.monotonic() > self._last_ok_start + self.lease_s - TRUST_MARGIN_S:
                for job_id, _ in leases:
                    self.on_lost(job_id, None)
            return
        self._last_ok_start = started
        for job_id in lost:
            state = states.get(job_id)
            self.on_lost(job_id, state[0] if state else None)

    def _renew(
        self, conn: psycopg.Connection[Any], leases: list[tuple[UUID, UUID]]
    ) -> tuple[list[UUID], dict[UUID, tuple[JobState, UUID | None]]]:
        """Renew ``leases``; the ids no longer held, and what their rows say now."""
        renewed = leases_db.job_heartbeat(conn, leases, self.lease_s)
        lost = [job_id for job_id, _ in leases if job_id not in renewed]
        return lost, (leases_db.job_states(conn, lost) if lost else {})

    def _on_stop(self) -> None:
        """Close the spare connection, if one is open (the shared one is its owner's)."""
        if self._spare is not None:
            self._spare.close()
