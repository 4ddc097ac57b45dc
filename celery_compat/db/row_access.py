"""Whether a connection's role reaches celery_compat's rows directly or through the functions a
producer is granted.

Why it exists: ``ujobs-bridge db grant --producer ROLE`` gives a role no row privilege on any
table; it sends and reads results by id through SECURITY DEFINER functions (migration
``0006_duties``). A worker or an application role keeps the plain statements, which are the
cheaper path a one-by-one ``.delay()`` is built on. Which path a connection takes is asked of
the database once per role (host, port, database, user), not per send; a send or read refused
for want of a privilege forgets the answer, so a role whose grants changed under a running
process is asked again on its next statement.

What it is not: a permission check. The database refuses what a role may not do; this only
picks the statement the role is allowed to run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from celery_compat.db import q


@dataclass(frozen=True, slots=True)
class Access:
    """What a role may do on celery_compat's rows without the producer functions."""

    writes_rows: bool  # row privileges: the plain send statements and result writes
    reads_rows: bool  # select results and job rows: the plain result reads


_KNOWN: dict[tuple[Any, ...], Access] = {}


def _connection(conn: psycopg.Connection[Any] | psycopg.Cursor[Any]) -> psycopg.Connection[Any]:
    return conn.connection if isinstance(conn, psycopg.Cursor) else conn


def _identity(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    pg = conn.pgconn
    return (pg.host, pg.port, pg.db, pg.user)


def of(conn: psycopg.Connection[Any] | psycopg.Cursor[Any]) -> Access:
    """What the role ``conn`` is connected as may do (asked once per role)."""
    connection = _connection(conn)
    identity = _identity(connection)
    found = _KNOWN.get(identity)
    if found is None:
        row = connection.execute(q("celery_row_access")).fetchone()
        assert row is not None
        found = _KNOWN[identity] = Access(bool(row[0]), bool(row[1]))
    return found


def forget(conn: psycopg.Connection[Any] | psycopg.Cursor[Any]) -> None:
    """Ask again on the next statement (one was refused for want of a privilege: the role's
    grants changed under this process)."""
    _KNOWN.pop(_identity(_connection(conn)), None)
