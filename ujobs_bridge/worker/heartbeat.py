"""Lease renewal for every job a worker holds, on its own connection.

Why it exists: a lease is the only thing that stops another worker from rescuing a job that is
still running, so renewals must not queue behind job bodies for a pooled connection (pool
exhaustion would turn into silent lease loss, then duplicates). One statement renews every held
lease at once; a lease that no longer matches (cancelled, or taken over after this process was
paused) is reported so the body is stopped. If renewals keep failing, the worker stops trusting
its leases at ``last good renewal start + lease - margin`` even without reaching the database.

A ``Service`` (``service.py``): ``stop()`` waits for a renewal in flight, then closes the
connection.

What it is not: the rescuer. Expired leases are recovered from the job rows by any worker's sweep.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from uuid import UUID

import psycopg

from ..db import jobs as driver
from ..db.connections import Reconnecting, Role
from ..records import JobState
from ..service import Service

log = logging.getLogger("ujobs.heartbeat")

TRUST_MARGIN_S = 1.0


class Heartbeat(Service):
    """Renews every held lease each ``interval_s`` (the first renewal one interval after start)."""

    def __init__(
        self,
        dsn: str,
        *,
        lease_s: float,
        interval_s: float,
        held: Callable[[], Sequence[tuple[UUID, UUID]]],
        on_lost: Callable[[UUID, JobState | None], None],
        role: Role,
    ) -> None:
        self.dsn = dsn
        self.lease_s = lease_s
        self.interval_s = interval_s
        self.held = held
        self.on_lost = on_lost
        self.role = role
        self._conn = Reconnecting(dsn, role)
        self._last_ok_start = time.monotonic()
        super().__init__("heartbeat", interval_s=interval_s, wait_first=True)

    @property
    def connection(self) -> Reconnecting:
        """Its one connection, which the node's presence (``presence.py``) shares: each of their
        statements autocommits, so the two loops interleave safely."""
        return self._conn

    def _on_start(self) -> None:
        self._last_ok_start = time.monotonic()

    def _on_stop(self) -> None:
        self._conn.close()

    def tick(self) -> None:
        """Renew every held lease once; report the ones that no longer match."""
        leases = list(self.held())
        started = time.monotonic()
        if not leases:
            self._last_ok_start = started
            return
        try:
            conn = self._conn.get()
            renewed = driver.job_heartbeat(conn, leases, self.lease_s)
            lost = [job_id for job_id, _ in leases if job_id not in renewed]
            states = driver.job_states(conn, lost) if lost else {}
        except psycopg.Error as exc:
            log.warning("ujobs.heartbeat.failed: %s", exc)
            self._conn.reset()
            if time.monotonic() > self._last_ok_start + self.lease_s - TRUST_MARGIN_S:
                for job_id, _ in leases:
                    self.on_lost(job_id, None)
            return
        self._last_ok_start = started
        for job_id in lost:
            state = states.get(job_id)
            self.on_lost(job_id, state[0] if state else None)
