"""One job steered by hand in SQL (``sql/jobs.sql``): cancel a live job, requeue an ended one.

Why it exists: an operator stops a job (a running body is signalled at once: the cancel's
NOTIFY on ``x_jobs_cancel``) or gives a dead or cancelled job fresh attempts. The CLI (through
``introspect.py``) and Celery's ``revoke`` (``celery_compat/control.py``) call these; each says
only whether the job was in a state the action applies to, and the caller explains otherwise.

What it is not: the same actions on every job a filter matches (``bulk.py``, which changes each
row exactly as these do) or the reads (``job_reads.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.sql import q

Conn = psycopg.Connection[Any]


def job_cancel(conn: Conn, job_id: UUID, error: str) -> bool:
    return conn.execute(q("job_cancel"), {"id": job_id, "error": error}).fetchone() is not None


def job_requeue(conn: Conn, job_id: UUID, now: datetime | None) -> bool:
    return conn.execute(q("job_requeue"), {"id": job_id, "now": now}).fetchone() is not None
