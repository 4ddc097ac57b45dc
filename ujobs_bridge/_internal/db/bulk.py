"""Operator actions on many jobs at once: count, cancel or requeue every row a filter matches.

Why it exists: after an incident an operator cancels a whole queue's backlog or requeues every
dead letter of one task, which one id at a time cannot do. Each action is one statement (one
transaction), and does to each row exactly what the one-row action does (``job_cancel``,
``job_requeue`` in ``steering.py``), so the rules live in one place per action.

What it is not: the confirmation (the CLI counts first and asks) or the filter's parsing (globs
are turned into LIKE patterns by the caller, ``introspect.name_pattern``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]

CANCELLABLE = ("ready", "running", "sleeping", "waiting")
REQUEUEABLE = ("dead", "cancelled")


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which rows: every given field must match (``name_like`` is a LIKE pattern, ``ids`` a
    list of job ids); none given matches every row."""

    state: str | None = None
    queue: str | None = None
    name_like: str | None = None
    ids: Sequence[UUID] | None = None

    def params(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "queue": self.queue,
            "name_like": self.name_like,
            "ids": list(self.ids) if self.ids is not None else None,
        }


def job_count_matching(conn: Conn, where: JobFilter, states: Sequence[str]) -> int:
    """Rows matching ``where`` whose state is one of ``states``."""
    row = conn.execute(q("job_count_matching"), {**where.params(), "states": list(states)})
    found = row.fetchone()
    return int(found[0]) if found else 0


def job_cancel_matching(conn: Conn, where: JobFilter, error: str) -> int:
    """Cancel every live row matching ``where`` (running bodies are signalled); how many."""
    found = conn.execute(q("job_cancel_matching"), {**where.params(), "error": error}).fetchone()
    return int(found[0]) if found else 0


def job_requeue_matching(conn: Conn, where: JobFilter, now: datetime | None) -> int:
    """Requeue every dead or cancelled row matching ``where``, skipping one whose idempotency
    key a live job holds; how many."""
    found = conn.execute(q("job_requeue_matching"), {**where.params(), "now": now}).fetchone()
    return int(found[0]) if found else 0


def job_discard_matching(conn: Conn, where: JobFilter) -> int:
    """Delete every dead row matching ``where`` (its steps go with it); how many."""
    found = conn.execute(q("job_discard_matching"), where.params()).fetchone()
    return int(found[0]) if found else 0
