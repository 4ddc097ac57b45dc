"""Applies the numbered, forward-only migrations in ``migrations/``, checks them read-only, and
grants an application role what the runtime needs.

Why it exists: the schema owner upgrades (``ujobs-bridge db upgrade``), and two processes
upgrading together must not both run the same DDL: all pending migrations run in ONE transaction
that first takes a transaction-scoped advisory lock; the second waits, then finds nothing left to
do. Runtime paths only ``check`` (a read of ``x_schema_version``, no DDL), so an application role
without CREATE rights works; ``grant`` gives such a role exactly the row privileges it uses.

What it is not: a down-migration tool (a database newer than this package is refused, not
rolled back), or the policy of who may upgrade (``ujobs_bridge._internal.config.schema_access``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.errors import ErrorCode, SchemaError

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
    try:
        rows = conn.execute(q("schema_versions")).fetchall()
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SchemaError(
            "this role may not read the schema version (x_schema_version)",
            code=ErrorCode.SCHEMA_PRIVILEGE,
            hint="as the schema owner, run `ujobs-bridge db grant ROLE` for this role",
        ) from exc
    return [AppliedMigration(int(r[0]), str(r[1]), r[2]) for r in rows]


def _refuse_newer(done: set[int]) -> None:
    newest = max((m.version for m in available()), default=0)
    if done and max(done) > newest:
        raise SchemaError(
            f"the database schema is at version {max(done)}, newer than this package ({newest})",
            code=ErrorCode.SCHEMA_NEWER,
            hint="upgrade ujobs-bridge on this machine to the version that migrated the database",
        )


def upgrade(dsn: str) -> list[Migration]:
    """Apply every pending migration; returns what this call applied (empty if up to date)."""
    ran: list[Migration] = []
    with connections.connect(dsn, MIGRATE_ROLE) as conn, conn.transaction():
        conn.execute(q("schema_lock"))
        conn.execute(q("schema_version_table"))
        done = {m.version for m in applied(conn)}
        _refuse_newer(done)
        for migration in available():
            if migration.version in done:
                continue
            conn.execute(migration.sql)
            conn.execute(
                q("schema_version_record"),
                {"version": migration.version, "name": migration.name},
            )
            ran.append(migration)
    return ran


def check(dsn: str) -> list[Migration]:
    """The migrations ``dsn`` lacks, read without DDL; a schema newer than this package refused."""
    with connections.connect(dsn, READ_ROLE) as conn:
        done = {m.version for m in applied(conn)}
    _refuse_newer(done)
    return [m for m in available() if m.version not in done]


def require_current(dsn: str) -> None:
    """Refuse to run against a schema that is missing migrations (read-only: never DDL)."""
    missing = check(dsn)
    if missing:
        raise SchemaError(
            f"the database is missing {len(missing)} migration(s), "
            f"first {missing[0].version:04d}_{missing[0].name}",
            hint="run `ujobs-bridge db upgrade` as the schema owner "
            "(or set UJOBS_AUTO_UPGRADE=1 to let this process apply them)",
        )


def grant(dsn: str, role: str) -> list[str]:
    """Give ``role`` the privileges the runtime uses on this package's relations (connect, schema
    usage, row privileges on every ``x_`` table, its identity sequences); returns their names.
    Idempotent; run it again after an upgrade that adds tables."""
    with connections.connect(dsn, MIGRATE_ROLE) as conn, conn.transaction():
        exists = conn.execute(q("schema_role_exists"), {"role": role}).fetchone()
        if exists is None or not exists[0]:
            raise SchemaError(
                f"there is no role {role!r} in this cluster",
                code=ErrorCode.ROLE_NOT_FOUND,
                hint=f"create it first (create role {role} login), then run `db grant` again",
            )
        names = conn.execute(q("schema_current_names")).fetchone()
        assert names is not None
        who = sql.Identifier(role)
        conn.execute(
            sql.SQL(q("schema_grant_connect")).format(database=sql.Identifier(names[0]), role=who)
        )
        conn.execute(
            sql.SQL(q("schema_grant_usage")).format(schema=sql.Identifier(names[1]), role=who)
        )
        granted: list[str] = []
        for relname, is_sequence in conn.execute(q("schema_grantable_relations")).fetchall():
            statement = q("schema_grant_sequence") if is_sequence else q("schema_grant_table")
            conn.execute(sql.SQL(statement).format(relation=sql.Identifier(relname), role=who))
            granted.append(str(relname))
    return granted
