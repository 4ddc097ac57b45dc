"""Retention: delete what is finished and old, as a job with one durable step per table.

Why it exists: every table that grows per job (jobs and their steps, the per-minute counts of
finished jobs, events, outbox rows, the
scheduler's fire ledger, and what plugins add: celery_compat's results) needs a sweep, or every row written is a row
kept. The sweep is a ``job``, so it gets retries, cancellation and ``jobs show`` for free. One
step per table means a killed attempt resumes at the table it stopped on; the cutoff is read
ONCE per pass and stored as the first step, so every table and every resumed attempt compares
against the same instant. Targets are read once per attempt, and two targets under one name are
refused before the first delete. Only terminal, expired rows go: nothing ready, running or
suspended is ever deleted.

Which clock: the purged columns (``finished_at``, ``published_at``, ``fired_at``) are stamped
by the database, so a cutoff taken from the injected clock alone would compare two clocks: a
frozen or skewed clock a year ahead would delete rows that finished a minute ago. The cutoff is
therefore ``min(injected clock, database clock) - older_than``: a row goes only when it is
older than ``older_than`` by both. A clock behind keeps rows longer, which is safe.

What it is not: SQL (the deletes run in ``ujobs_bridge._internal.db.retention``) or a schedule. ``PURGE_TASK_CRON`` is the hourly cron the scheduler uses for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from ujobs_bridge._internal.clock import Clock
from ujobs_bridge._internal.config import plugins
from ujobs_bridge._internal.db import retention, session
from ujobs_bridge._internal.db.retention import PurgeBatch
from ujobs_bridge._internal.faults import fault
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.jobs.context import current_job
from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.job import job
from ujobs_bridge.steps import step

DEFAULT_OLDER_THAN_S = 7 * 24 * 3600.0
PURGE_TASK_CRON = "17 * * * *"  # hourly, off the top of the hour
BATCH = 5000


@dataclass(frozen=True, slots=True)
class PurgeTarget:
    """One table's expired rows; ``delete(conn, cutoff)`` returns how many it removed."""

    name: str
    delete: Callable[[psycopg.Connection[Any], datetime], int]


def _batched(
    statement: Callable[[psycopg.Connection[Any], PurgeBatch], int],
) -> Callable[[psycopg.Connection[Any], datetime], int]:
    def delete(conn: psycopg.Connection[Any], cutoff: datetime) -> int:
        total = 0
        while True:
            removed = statement(conn, PurgeBatch(cutoff, BATCH))
            total += removed
            if removed < BATCH:
                return total

    return delete


def builtin_targets() -> list[PurgeTarget]:
    return [
        PurgeTarget("x_jobs", _batched(retention.purge_jobs)),
        PurgeTarget("x_job_counts", _batched(retention.purge_job_counts)),
        PurgeTarget("x_job_failure_counts", _batched(retention.purge_job_failure_counts)),
        PurgeTarget("x_job_events", _batched(retention.purge_events)),
        PurgeTarget("x_outbox", _batched(retention.purge_outbox)),
        PurgeTarget("x_scheduler_fires", _batched(retention.purge_fires)),
    ]


def plugin_targets() -> list[PurgeTarget]:
    """Targets the packages above the engine contribute (entry-point group
    ``ujobs_bridge.retention``; celery_compat's result, ledger and chord tables)."""
    found: list[PurgeTarget] = []
    for _name, source in plugins.load_all(plugins.RETENTION_GROUP):
        found.extend(source())
    return found


_extra: list[Callable[[], Sequence[PurgeTarget]]] = []
_extra_lock = threading.Lock()


def register_targets(source: Callable[[], Sequence[PurgeTarget]]) -> None:
    """Add targets (read once per attempt, never captured): e.g. celery_compat's result table."""
    with _extra_lock:
        _extra.append(source)


def targets() -> list[PurgeTarget]:
    found = builtin_targets() + plugin_targets()
    with _extra_lock:
        sources = list(_extra)
    for source in sources:
        found.extend(source())
    names = [t.name for t in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"purge targets {twice} are registered twice",
            hint="give every purge target a distinct name; nothing was deleted",
            code=ErrorCode.PURGE_TARGET_DUPLICATE,
        )
    return found


def cutoff_for(conn: psycopg.Connection[Any], clock: Clock, older_than_s: float) -> datetime:
    """The one cutoff of a pass: the earlier of the injected clock and the database's clock,
    minus ``older_than_s`` (see the module docstring for why both)."""
    validation.lookback("older_than", validation.seconds("older_than", older_than_s))
    now: datetime = min(clock.now(), session.database_now(conn))
    return now - timedelta(seconds=older_than_s)


def run_pass(conn: psycopg.Connection[Any], cutoff: datetime) -> dict[str, int]:
    """Delete everything expired at ``cutoff`` from every target, without steps (the CLI)."""
    report: dict[str, int] = {}
    for target in targets():
        report[target.name] = target.delete(conn, cutoff)
        fault("purge.between_tables")
    return report


@job(name="ujobs.purge", queue="ujobs", max_attempts=5, backoff=30)
def purge(older_than_s: float = DEFAULT_OLDER_THAN_S) -> dict[str, int]:
    """The retention sweep as a job: one durable step per table."""
    validation.seconds("older_than", older_than_s)
    sweep = targets()  # once per attempt; refuses duplicates before any delete
    ctx = current_job()

    def read_cutoff() -> str:
        with ctx.connection() as conn:
            return cutoff_for(conn, ctx.clock, older_than_s).isoformat()

    cutoff = datetime.fromisoformat(step.run("cutoff", read_cutoff))
    report: dict[str, int] = {}
    for target in sweep:

        def delete(target: PurgeTarget = target) -> int:
            with ctx.connection() as conn:
                return target.delete(conn, cutoff)

        report[target.name] = step.run(f"purge:{target.name}", delete)
        fault("purge.between_tables")
    return report
