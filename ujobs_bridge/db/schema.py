"""Applies the numbered, forward-only migrations in ``migrations/`` and records each one.

Why it exists: every long-running command upgrades the schema before it starts, so two processes
starting together must not both run the same DDL. All pending migrations run in ONE transaction
that first takes a transaction-scoped advisory lock: the second process waits, then finds nothing
left to do. The lock is released by the commit, so it is held only for the DDL.

What it is not: a down-migration tool. A database newer than this package is refused, not
rolled back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any, LiteralString

import psycopg

from ..errors import ErrorCode, SchemaError
from . import connections
from .sql import q

# Migrations run in one transaction of their own; reading the applied versions needs none.
MIGRATE_ROLE = connections.Role("schema", autocommit=False)
READ_ROLE = connections.Role("schema")

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: LiteralString


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    version: int
    name: str
    applied_at: datetime


def available() -> list[Migration]:
    """The migrations shipped with the package, in order; gaps and bad names refused."""
    folder = resources.files(__package__).joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE.match(entry.name)
        if match is None:
            raise SchemaError(
                f"migration file {entry.name!r} is not named NNNN_name.sql",
                code=ErrorCode.MIGRATION_INVALID,
                hint="rename it to a four-digit number, an underscore and a lowercase name",
            )
        # Shipped with the package: vouched for as a literal.
        text: LiteralString = entry.read_text(encoding="utf-8")
        found.append(Migration(int(match.group(1)), match.group(2), text))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise SchemaError(
                f"migration {migration.version:04d} follows a gap (expected {expected:04d})",
                code=ErrorCode.MIGRATION_INVALID,
                hint="number migrations consecutively from 0001",
            )
    return found


def applied(conn: psycopg.Connection[Any]) -> list[AppliedMigration]:
    row = conn.execute(q("schema_table_exists")).fetchone()
    if row is None or not row[0]:
        return []
    rows = conn.execute(q("schema_versions")).fetchall()
    return [AppliedMigration(int(r[0]), str(r[1]), r[2]) for r in rows]


def upgrade(dsn: str) -> list[Migration]:
    """Apply every pending migration; returns what this call applied (empty if up to date)."""
    ran: list[Migration] = []
    with connections.connect(dsn, MIGRATE_ROLE) as conn, conn.transaction():
        conn.execute(q("schema_lock"))
        conn.execute(q("schema_version_table"))
        done = {m.version for m in applied(conn)}
        shipped = available()
        newest = max((m.version for m in shipped), default=0)
        if done and max(done) > newest:
            raise SchemaError(
                f"the database schema is at version {max(done)}, newer than this package ({newest})",
                code=ErrorCode.SCHEMA_NEWER,
                hint="upgrade ujobs-bridge on this machine to the version that migrated the database",
            )
        for migration in shipped:
            if migration.version in done:
                continue
            conn.execute(migration.sql)
            conn.execute(
                q("schema_version_record"),
                {"version": migration.version, "name": migration.name},
            )
            ran.append(migration)
    return ran


def pending(dsn: str) -> list[Migration]:
    with connections.connect(dsn, READ_ROLE) as conn:
        done = {m.version for m in applied(conn)}
    return [m for m in available() if m.version not in done]


def require_current(dsn: str) -> None:
    """Refuse to run against a schema that is missing migrations."""
    missing = pending(dsn)
    if missing:
        raise SchemaError(
            f"the database is missing {len(missing)} migration(s), first {missing[0].version:04d}_{missing[0].name}",
            hint="run `ujobs-bridge db upgrade` (long-running commands do it themselves)",
        )
