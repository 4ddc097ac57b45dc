"""The retention sweep's deletes (``sql/retention.sql``): one bounded batch per call, per table.

Why it exists: each delete takes only rows that are finished AND older than the cutoff, and never
more than ``limit`` at a time, so a sweep over millions of rows holds no long lock and a killed
attempt loses at most one batch. The rules of what may go (nothing live, each task's latest fire
kept, an event a live job consumed kept) are in the statements; they run only here.

What it is not: the sweep (``ujobs_bridge._internal.jobs.purge``: the cutoff, the loop over batches, one step
per table) or the targets other packages contribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class PurgeBatch:
    """Delete rows expired before ``cutoff``, at most ``limit`` of them."""

    cutoff: datetime
    limit: int

    def params(self) -> dict[str, Any]:
        return {"cutoff": self.cutoff, "limit": self.limit}


def purge_jobs(conn: Conn, batch: PurgeBatch) -> int:
    """Finished jobs (their steps go by cascade); returns how many rows went."""
    return conn.execute(q("purge_jobs"), batch.params()).rowcount


def purge_job_counts(conn: Conn, batch: PurgeBatch) -> int:
    """Per-minute counts of finished jobs (the dashboard's chart) older than the cutoff."""
    return conn.execute(q("purge_job_counts"), batch.params()).rowcount


def purge_job_failure_counts(conn: Conn, batch: PurgeBatch) -> int:
    """Per-minute counts of the dead jobs with a failure kind, older than the cutoff."""
    return conn.execute(q("purge_job_failure_counts"), batch.params()).rowcount


def purge_events(conn: Conn, batch: PurgeBatch) -> int:
    """Old events, except one a live job consumed."""
    return conn.execute(q("purge_events"), batch.params()).rowcount


def purge_outbox(conn: Conn, batch: PurgeBatch) -> int:
    """Published outbox rows."""
    return conn.execute(q("purge_outbox"), batch.params()).rowcount


def purge_fires(conn: Conn, batch: PurgeBatch) -> int:
    """Old fire records, except each task's latest."""
    return conn.execute(q("purge_fires"), batch.params()).rowcount
