"""Stage a job inside the caller's transaction; the relay publishes it after commit.

Why it exists: when the jobs live in another database than the one the caller is writing to
(or when the caller wants the enqueue to be a plain row in its own schema), the job cannot join
the caller's transaction directly. ``stage(conn, request)`` writes it to ``x_outbox`` in the
caller's database and transaction: it exists if and only if the caller's work commits. The
relay (``relay.py``) turns staged rows into jobs, in order.

What it is not: needed when the jobs live in the caller's database: ``configure(conn=conn)``
already enqueues inside the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db import outbox as store
from ujobs_bridge.job import EnqueueRequest


@dataclass(frozen=True, slots=True)
class Staged:
    outbox_id: int
    job_id: UUID


def stage(conn: psycopg.Connection[Any], request: EnqueueRequest) -> Staged:
    """Stage ``request`` (``my_job.call(...)`` or ``my_job.configure(...).call(...)``) in
    ``conn``'s current transaction."""
    spec = request.spec()
    return Staged(store.outbox_stage(conn, spec), spec.id)
