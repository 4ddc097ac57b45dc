"""An operator's actions on jobs: requeue (retry), cancel, discard, on every row a filter
matches, as one function both the dashboard's buttons and the Django admin's actions call.

Why it exists: the same click must do the same thing wherever it is made. The dashboard (a
Starlette app) and ``ujobs_django.jobs`` (Django's admin) each check who may act, then call
``act`` on a connection of theirs; the rows change exactly as the CLI's ``jobs requeue`` /
``cancel`` / ``discard`` change them (``db/bulk.py``).

What it is not: the permission check (each caller's: the dashboard's CSRF token and read-only
switch, Django's per-action permissions) nor the statements (``db/bulk.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from ujobs_bridge._internal.db import bulk

# The actions, in the words the dashboard's addresses use: ``requeue`` is a retry.
ACTIONS = ("requeue", "cancel", "discard")


def act(
    conn: psycopg.Connection[Any],
    action: str,
    where: bulk.JobFilter,
    now: datetime | None,
    *,
    cancel_error: str,
) -> int | None:
    """Run ``action`` on the rows ``where`` matches; how many changed, None for an unknown
    action. ``requeue``: dead or cancelled rows get fresh attempts (a row whose idempotency key
    a live job holds is skipped); ``cancel``: live rows are cancelled with ``cancel_error``
    (running bodies are signalled); ``discard``: dead rows are deleted. A role without the
    operator duty raises ``psycopg.errors.InsufficientPrivilege``."""
    if action == "requeue":
        return bulk.job_requeue_matching(conn, where, now)
    if action == "cancel":
        return bulk.job_cancel_matching(conn, where, cancel_error)
    if action == "discard":
        return bulk.job_discard_matching(conn, where)
    return None
