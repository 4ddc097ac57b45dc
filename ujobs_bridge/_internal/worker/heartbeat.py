"""Lease renewal for every job a worker holds, on the worker's working connection.

Why it exists: a lease is the only thing that stops another worker from rescuing a job that is
still running, so renewals must not queue behind job bodies for a pooled connection (pool
exhaustion would turn into silent lease loss, then duplicates). They run on the connection the
claim loop and the node's presence share (``Reconnecting.using``): they wait for one
claim-loop statement, never for a body, and the worker holds one connection fewer. A statement
that holds the connection longer than a heartbeat interval counts as a failed renewal, so the
trust limit below still applies. One statement renews every held
lease at once; a lease that no longer matches (cancelled, or taken over after this process was
paused) is reported so the body is stopped. If renewals keep failing, the worker stops trusting
its leases at ``last good renewal start + lease - margin`` even without reaching the database
(any failure of a renewal counts, not only a database error): it cannot tell a database that is
down (no lease runs out then, nor within a lease of its return) from being cut off, so the
stopper signals the bodies and still writes, fenced, what they end with.

A ``Service`` (``service.py``): ``stop()`` waits for a renewal in flight; the connection is
closed by its owner (the claim loop's ``Claims``).

What it is not: the rescuer. Expired leases are recovered from the job rows by any worker's sweep.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
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
    ) -> None:
        self.lease_s = lease_s
        self.interval_s = interval_s
        self.held = held
        self.on_lost = on_lost
        self._conn = conn
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
        try:
            with self._conn.using(wait_s=self.interval_s) as conn:
                renewed = leases_db.job_heartbeat(conn, leases, self.lease_s)
                lost = [job_id for job_id, _ in leases if job_id not in renewed]
                states = leases_db.job_states(conn, lost) if lost else {}
        except Exception as exc:  # any failure: renew again next time, trust the leases less
            if isinstance(exc, psycopg.Error):
                log.warning("ujobs.heartbeat.failed: %s", exc)
            else:
                log.exception("ujobs.heartbeat.failed")
            if not isinstance(exc, Busy):  # a claim statement still holds it: not broken
                self._conn.reset()
            if time.monotonic() > self._last_ok_start + self.lease_s - TRUST_MARGIN_S:
                for job_id, _ in leases:
                    self.on_lost(job_id, None)
            return
        self._last_ok_start = started
        for job_id in lost:
            state = states.get(job_id)
            self.on_lost(job_id, state[0] if state else None)
