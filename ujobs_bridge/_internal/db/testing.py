"""The test kit's SQL: each function runs one named statement from ``sql/testing.sql``.

Why it exists: ``ujobs_bridge.testing`` creates and drops a private database, empties it between
tests, claims the one job ``perform`` inserted and counts due jobs for ``run_until_idle``. Those
statements belong to the engine's SQL seam like every other, so the kit holds no SQL text and
names a database only through ``psycopg.sql.Identifier``.

What it is not: engine behaviour. The worker never runs these; a database name here is always one
the kit generated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from ujobs_bridge._internal.db.connections import Role, connect
from ujobs_bridge._internal.db.leases import _claimed
from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.records import ClaimedJob

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class ClaimById:
    """Claim the job ``id`` under lease ``token`` for ``lease_s`` seconds, as ``worker``."""

    id: UUID
    token: UUID
    lease_s: float
    worker: str
    now: datetime | None


@dataclass(frozen=True, slots=True)
class DueJobs:
    """Jobs of these queues and names whose run_at has come (``now`` None: the database's)."""

    queues: Sequence[str]
    names: Sequence[str]
    now: datetime | None


def database_create(admin: Conn, name: str) -> None:
    """Create database ``name`` (``admin`` must be in autocommit: no transaction allowed)."""
    admin.execute(sql.SQL(q("testing_database_create")).format(name=sql.Identifier(name)))


def database_drop(admin: Conn, name: str) -> None:
    """Drop database ``name`` if it exists, ending its sessions."""
    admin.execute(sql.SQL(q("testing_database_drop")).format(name=sql.Identifier(name)))


def tables_empty(conn: Conn) -> None:
    """Empty every ``x_`` table but the migration record (the schema stays installed)."""
    conn.execute(q("testing_tables_empty"))


def job_claim_by_id(conn: Conn, claim: ClaimById) -> ClaimedJob | None:
    """Claim one job like ``job_claim`` does; ``None`` if it is not claimable (running, ended)."""
    params = {
        "id": claim.id,
        "token": claim.token,
        "lease_s": claim.lease_s,
        "worker": claim.worker,
        "now": claim.now,
        "start": 1,  # it runs at once: its start is recorded with the claim
    }
    row = conn.execute(q("testing_job_claim"), params).fetchone()
    return None if row is None else _claimed(row)


def jobs_due(conn: Conn, due: DueJobs) -> int:
    params = {"queues": list(due.queues), "names": list(due.names), "now": due.now}
    row = conn.execute(q("testing_jobs_due"), params).fetchone()
    return 0 if row is None else int(row[0])


def pgbouncer_clients(console_dsn: str) -> list[tuple[str, str]]:
    """``(database, application_name)`` of every client of the PgBouncer whose admin console is
    at ``console_dsn`` (its ``pgbouncer`` database; the console speaks the simple protocol only,
    hence a client-side cursor)."""
    with connect(console_dsn, Role("testing:pgbouncer")) as conn:
        cur = psycopg.ClientCursor(conn)
        cur.execute(q("testing_pgbouncer_clients"))
        names = [d.name for d in cur.description or ()]
        rows = cur.fetchall()
    database, app = names.index("database"), names.index("application_name")
    return [(str(row[database]), str(row[app] or "")) for row in rows]
