"""Due jobs nobody claims, in SQL (``sql/jobs.sql``): counted per name, or dead-lettered.

Why it exists: a job whose name no worker declares waits unseen for ever. A worker finds those
of its own queues (``job_unregistered``) and, when configured to
(``WorkerConfig.unregistered_dead_after_s``), dead-letters them with an error naming the task
(``job_dead_unregistered``); an operator asks for every claimable job left due too long, on any
queue (``job_stranded``). The answers are ``NameBacklog`` rows per queue and name, read from the
claim table's due rows (``x_job_claimable``).

What it is not: the decision to warn or dead-letter (``worker/claims.py``) or the claim itself
(``leases.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.records import JobState

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class NameBacklog:
    """Due, unclaimed jobs of one name on one queue (and state, where a read groups by it):
    how many, since when, and for how long the oldest has been due, in seconds."""

    queue: str
    name: str
    jobs: int
    oldest_run_at: datetime
    oldest_s: float
    state: JobState = JobState.READY


@dataclass(frozen=True, slots=True)
class UnregisteredParams:
    """Due jobs on ``queues`` whose name is not in ``names``, due for at least ``after_s``
    seconds; only the first ``scan`` rows of each queue in claim order are read. ``now`` is the
    injected clock's instant (``None``: the database's)."""

    queues: Sequence[str]
    names: Sequence[str]
    after_s: float
    scan: int
    now: datetime | None = None

    def params(self) -> dict[str, Any]:
        return {
            "queues": list(self.queues),
            "names": list(self.names),
            "after_s": self.after_s,
            "scan": self.scan,
            "now": self.now,
        }


def job_unregistered(conn: Conn, find: UnregisteredParams) -> list[NameBacklog]:
    rows = conn.execute(q("job_unregistered"), find.params()).fetchall()
    return [NameBacklog(r[0], r[1], int(r[2]), r[3], float(r[4])) for r in rows]


@dataclass(frozen=True, slots=True)
class DeadUnregisteredParams:
    """Dead-letter up to ``limit`` jobs of ``queue`` whose name is not in ``names`` and that
    have been due for at least ``after_s`` seconds; ``error`` is the last error, ``{name}`` in it
    replaced by the job's name."""

    queue: str
    names: Sequence[str]
    after_s: float
    limit: int
    error: str
    now: datetime | None = None

    def params(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "names": list(self.names),
            "after_s": self.after_s,
            "limit": self.limit,
            "error": self.error,
            "now": self.now,
        }


def job_dead_unregistered(conn: Conn, dead: DeadUnregisteredParams) -> list[tuple[UUID, str]]:
    rows = conn.execute(q("job_dead_unregistered"), dead.params()).fetchall()
    return [(row[0], row[1]) for row in rows]


def job_stranded(conn: Conn, *, after_s: float, now: datetime | None) -> list[NameBacklog]:
    """Claimable jobs due for at least ``after_s`` seconds and not claimed, per queue, state
    and name (every queue: this read knows nothing of any worker's registry)."""
    rows = conn.execute(q("job_stranded"), {"after_s": after_s, "now": now}).fetchall()
    return [
        NameBacklog(r[0], r[2], int(r[3]), r[4], float(r[5]), state=JobState(r[1])) for r in rows
    ]
