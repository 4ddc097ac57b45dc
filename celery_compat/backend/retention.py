"""celery_compat's rows for the engine's retention sweep (entry point ``ujobs_bridge.retention``).

Why it exists: the facade's tables grow per task (results, the message ledger, chord parts,
revokes, Celery's events) and the engine's ``purge`` job must sweep them too, without the engine
knowing them. Results go once past ``result_expires`` (already invisible to ``AsyncResult``);
ledger and revoke rows once older than the cutoff with their jobs finished: the ledger is the
dedup window of Celery task ids, so it lasts as long as the jobs. Events (``x_celery_events``, a
monitoring log several rows per task) go once their timestamp is older than the cutoff, in
batches, so the table stays bounded by the retention window.

What it is not: a schedule or a second sweep; the engine's purge job runs these targets as its
durable steps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from celery_compat.db.events import purge_events
from celery_compat.db.retention import purge_celery
from ujobs_bridge.ext.retention import BATCH, PurgeTarget


def purge_old_events(conn: psycopg.Connection[Any], cutoff: datetime) -> int:
    """Every event older than ``cutoff``, ``BATCH`` rows per statement."""
    total = 0
    while True:
        removed = purge_events(conn, cutoff, BATCH)
        total += removed
        if removed < BATCH:
            return total


def targets() -> list[PurgeTarget]:
    return [
        PurgeTarget("x_celery", purge_celery),
        PurgeTarget("x_celery_events", purge_old_events),
    ]
