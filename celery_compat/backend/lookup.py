"""How ``jobs show``, ``jobs ls --task-id`` and the dashboard find jobs by a Celery task id.

Why it exists: the id in a Celery worker's log is the task id, not the job's; every Celery row
keeps its task id in ``input`` (indexed, migration 0013), one row per message: a retried task
has several.
The engine cannot read Celery's tables, so it asks through the ``ujobs_bridge.lookup``
entry-point group (``ujobs_bridge/plugins.py``), and this is celery_compat's answer.

What it is not: revoke or AsyncResult (they read the same rows for their own ends).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg

from celery_compat.db import message_jobs


def job_ids(conn: psycopg.Connection[Any], text: str) -> list[UUID]:
    """The jobs of Celery task id ``text``, its newest message (highest retries) first."""
    return [row[0] for row in message_jobs.jobs_of_task(conn, text, include_done=True)]
