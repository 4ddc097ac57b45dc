"""The fleet-wide rate-limit buckets in SQL: take one token of a task's bucket.

Why it exists: a bucket is a row of ``x_rate_limits`` that every worker takes tokens from in one
row-locked statement (``rate_limit_take`` in ``sql/celery.sql``); this module is the only code
that runs it.

What it is not: the policy (which rate applies, when to snooze): that is ``rate_limit.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from celery_compat.db import q


@dataclass(frozen=True, slots=True)
class TokenTake:
    """One token asked of bucket ``key``, which refills ``rate`` tokens per second up to
    ``capacity``; ``now`` is the injected clock (``None``: the database's)."""

    key: str
    rate: float
    capacity: float
    now: datetime | None

    def params(self) -> dict[str, Any]:
        return {"key": self.key, "rate": self.rate, "capacity": self.capacity, "now": self.now}


def take(conn: psycopg.Connection[Any], ask: TokenTake) -> bool:
    """Spend one token; False when the bucket is empty."""
    return conn.execute(q("rate_limit_take"), ask.params()).fetchone() is not None
