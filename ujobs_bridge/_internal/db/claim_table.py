"""The claim table's upkeep (``sql/claim_table.sql``): the worker's vacuum of ``x_job_claimable``.

Why it exists: ``x_job_claimable`` (migration 0019) takes one insert and one delete per job, so
its claim index needs a vacuum after every few thousand claims to reuse its emptied pages, more
often than autovacuum can start one at a high claim rate (see the statement's comment). The
claim loop calls ``vacuum`` once it has claimed as many jobs as the table holds
(``worker/claims.py``, ``CLAIM_VACUUM_EVERY`` at the least).

What it is not: the decision when (``worker/claims.py``) or a substitute for autovacuum, which
still vacuums every table, this one included, and is all a role that may not vacuum it gets.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]


def vacuum_allowed(conn: Conn) -> bool:
    """Whether this connection's role may vacuum ``x_job_claimable``."""
    row = conn.execute(q("claim_table_vacuum_allowed")).fetchone()
    return bool(row and row[0])


def live_rows(conn: Conn) -> int:
    """The live rows of ``x_job_claimable`` as the statistics count them (a second or so behind)."""
    row = conn.execute(q("claim_table_live_rows")).fetchone()
    return int(row[0]) if row else 0


def vacuum(conn: Conn) -> None:
    """Vacuum ``x_job_claimable`` unless a vacuum of it is running; on an autocommit connection
    outside a transaction (VACUUM cannot run inside one)."""
    conn.execute(q("claim_table_vacuum"))
