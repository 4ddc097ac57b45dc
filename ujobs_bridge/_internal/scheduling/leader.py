"""Leader election for the scheduler: an expiring lease ROW, renewed by holder and term.

Why it exists: exactly one scheduler should dispatch at a time, across processes and machines.
A session advisory lock dies with a pooled connection nobody can name; a lease row survives
poolers, shows who leads, and expires on its own. Renewal matches holder AND term, so a node that
lost its lease can never "renew" the winner's row; any error or a renewal that matches nothing
concedes at once. Locally the leader trusts its term only until the start of its last good
renewal + ttl - margin (monotonic clock): a paused or partitioned leader stops acting on its own.
Expiry is written and compared with the database's ``now()`` only, so a node whose clock runs
ahead cannot see a live lease as expired (no local time ever reaches the lease statements).

What it is not: the guarantee against double fire. That is the (task, occurrence) unique key in
``x_scheduler_fires``; leadership only keeps the work on one node. Nor the SQL: the statements
are run by ``ujobs_bridge._internal.db.scheduling``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

from ujobs_bridge._internal.db import scheduling as store
from ujobs_bridge._internal.db.connections import Reconnecting, Role
from ujobs_bridge._internal.db.scheduling import LeaderInfo, LeaderTerm
from ujobs_bridge._internal.faults import fault

log = logging.getLogger("ujobs.leader")

DEFAULT_GROUP = "default"
TRUST_MARGIN_S = 1.0

__all__ = ["DEFAULT_GROUP", "LeaderInfo", "PgLeaseLeader", "current"]


class PgLeaseLeader:
    """``conn``: a connection to share (the scheduler's: its statements run inside
    ``using()``); default, one of its own. Every statement autocommits, so nothing about the
    lease lives in a session: it works through PgBouncer's transaction pooling."""

    def __init__(
        self,
        dsn: str,
        *,
        holder: str,
        ttl_s: float,
        group: str = DEFAULT_GROUP,
        conn: Reconnecting | None = None,
    ) -> None:
        self.dsn = dsn
        self.holder = holder
        self.ttl_s = ttl_s
        self.group = group
        self.term: int | None = None
        self.margin_s = min(TRUST_MARGIN_S, ttl_s / 4)
        self._trusted_until = 0.0
        self._conn = conn or Reconnecting(dsn, Role(f"scheduler:{holder}"))

    def _lease(self) -> LeaderTerm:
        return LeaderTerm(self.group, self.holder, self.ttl_s, self.term)

    @property
    def is_leader(self) -> bool:
        """Leader, and still inside the local trust window."""
        return self.term is not None and time.monotonic() < self._trusted_until

    def tick(self) -> bool:
        """Renew our term, or try to take an expired one. Any error concedes."""
        started = time.monotonic()
        try:
            with self._conn.using() as conn:
                if self.term is not None and not store.leader_renew(conn, self._lease()):
                    log.warning("ujobs.leader.lost: %s lost term %s", self.holder, self.term)
                    self.term = None
                if self.term is None:
                    term = store.leader_elect(conn, self._lease())
                    if term is not None:
                        self.term = term
                        log.info("ujobs.leader.elected: %s holds term %s", self.holder, self.term)
                        fault("leader.after_acquire")
        except psycopg.Error as exc:
            log.warning("ujobs.leader.error: %s concedes: %s", self.holder, exc)
            self.term = None
            self._conn.reset()
            return False
        if self.term is not None:
            self._trusted_until = started + self.ttl_s - self.margin_s
        return self.is_leader

    def resign(self) -> None:
        if self.term is None:
            return
        try:
            with self._conn.using() as conn:
                store.leader_resign(conn, self._lease())
        except psycopg.Error as exc:
            log.warning("ujobs.leader.resign_failed: %s", exc)
        self.term = None

    def close(self) -> None:
        self._conn.close()


def current(conn: psycopg.Connection[Any], group: str = DEFAULT_GROUP) -> LeaderInfo | None:
    return store.leader_get(conn, group)
