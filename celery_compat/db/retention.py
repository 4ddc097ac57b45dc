"""celery_compat's retention statement (``purge_celery``): results past their expiry, ledger and
revoke rows older than the cutoff whose jobs are finished, chord parts of finished chords.

Why it exists: the engine's purge job sweeps the facade's tables through the ``x_celery`` target
(``celery_compat/retention.py``); the SQL it runs lives here, in the facade's ``db``.

What it is not: the decision of when to sweep; the engine's purge job owns that.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from celery_compat.db import q


def purge_celery(conn: psycopg.Connection[Any], cutoff: datetime) -> int:
    """Delete the facade's expired rows at ``cutoff``; returns how many went."""
    row = conn.execute(q("purge_celery"), {"cutoff": cutoff}).fetchone()
    return 0 if row is None else int(row[0])
