"""A private Postgres database for a test session: created, upgraded, emptied, dropped.

Why it exists: tests of code that enqueues or runs jobs need the real schema on a real server,
isolated from every other run on the machine. ``TemporaryDatabase`` creates a database named
with the process id and a random suffix (parallel runs never collide), installs the schema with
the real migration runner (``db.schema.upgrade``, the one production uses), empties every ``x_``
table between tests (``reset()``) and drops the database at the end. The project's own tests,
the pytest plugin and ``celery_compat.contrib.pytest`` all use it.

What it is not: a server. It needs a running PostgreSQL and a role allowed to create databases,
named by the admin DSN (``UJOBS_TEST_ADMIN_DSN``); without one it raises
``DatabaseUnavailableError`` saying so.
"""

from __future__ import annotations

import os
import uuid
from types import TracebackType

import psycopg

from ujobs_bridge._internal.config.dsn import mask_dsn
from ujobs_bridge._internal.db import schema
from ujobs_bridge._internal.db import testing as testing_db
from ujobs_bridge._internal.db.connections import Role, connect
from ujobs_bridge.errors import DatabaseUnavailableError

ADMIN_DSN_ENV = "UJOBS_TEST_ADMIN_DSN"
DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
ADMIN_ROLE = Role("testing:admin")
RESET_ROLE = Role("testing:reset")


def admin_dsn_from_env() -> str:
    """The server to create test databases on: ``UJOBS_TEST_ADMIN_DSN``, else local postgres."""
    return os.environ.get(ADMIN_DSN_ENV) or DEFAULT_ADMIN_DSN


def dsn_as(dsn: str, user: str) -> str:
    """``dsn`` for role ``user`` (same host, database and options; no password)."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["user"] = user
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def dsn_for(admin_dsn: str, dbname: str) -> str:
    """``admin_dsn`` pointed at database ``dbname`` (same host, user and options)."""
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items()})


class TemporaryDatabase:
    """``with TemporaryDatabase() as db:`` gives ``db.dsn`` with the schema installed."""

    def __init__(self, admin_dsn: str | None = None, *, prefix: str = "ujobs_test") -> None:
        self.admin_dsn = admin_dsn or admin_dsn_from_env()
        self.name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.dsn = dsn_for(self.admin_dsn, self.name)
        self.created = False

    def __repr__(self) -> str:
        return f"TemporaryDatabase({self.name!r} on {mask_dsn(self.admin_dsn)})"

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        try:
            return connect(self.admin_dsn, ADMIN_ROLE)
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailableError(
                f"PostgreSQL is not reachable at {mask_dsn(self.admin_dsn)}: {exc}".strip(),
                hint=(
                    f"start PostgreSQL, or set {ADMIN_DSN_ENV} to a server where this role may"
                    " create databases (e.g. postgresql://postgres@127.0.0.1:5432/postgres)"
                ),
            ) from exc

    def create(self) -> str:
        """Create the database and install the schema; returns its DSN."""
        with self._admin() as admin:
            testing_db.database_create(admin, self.name)
        self.created = True
        try:
            schema.upgrade(self.dsn)
        except BaseException:
            self.drop()
            raise
        return self.dsn

    def reset(self) -> None:
        """Empty every ujobs table (the schema and its migration record stay)."""
        with connect(self.dsn, RESET_ROLE) as conn:
            testing_db.tables_empty(conn)

    def drop(self) -> None:
        """Drop the database (ending any session still on it). Idempotent."""
        if not self.created:
            return
        with self._admin() as admin:
            testing_db.database_drop(admin, self.name)
        self.created = False

    def __enter__(self) -> TemporaryDatabase:
        self.create()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.drop()
