"""Applies the numbered, forward-only migrations of every installed part of the schema, checks
them read-only, and grants an application role what the runtime needs.

Why it exists: the schema owner upgrades (``ujobs-bridge db upgrade``), and two processes
upgrading together must not both run the same DDL: all pending migrations run in ONE transaction
that first takes a transaction-scoped advisory lock; the second waits, then finds nothing left to
do. Runtime paths only ``check`` (a read of ``x_schema_version``, no DDL), so an application role
without CREATE rights works; ``grant`` gives such a role exactly the row privileges it uses.

The schema has parts, one ``MigrationSet`` per package: the engine's own (``migrations/`` beside
this module, part ``ujobs_bridge``) and each set a package above the engine contributes through
the ``ujobs_bridge.schema`` entry-point group (``plugins.py``; celery_compat and migrate own their
tables that way). The engine never imports them: it loads what the installed metadata names.
Sets run in dependency order (the engine first, then each set after those it ``requires``), each
numbered from 0001 and recorded under its part in ``x_schema_version``. A set's ``adopts`` says
which of its migrations an older engine migration already ran before the split; where that
engine record (version AND name) is present, the migration is recorded without running. The
decision is made inside the same locked transaction, from the records, so it holds for a database
left at any older version.

What it is not: a down-migration tool (a database newer than this package is refused, not
rolled back), or the policy of who may upgrade (``ujobs_bridge._internal.config.schema_access``).
"""

from __future__ import annotations

import enum
import functools
import importlib.util
import logging
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from ujobs_bridge._internal.config import plugins
from ujobs_bridge._internal.config.dsn import mask_dsn, upgrade_command_for
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.errors import ErrorCode, SchemaError

# Migrations run in one transaction of their own; reading the applied versions needs none.
MIGRATE_ROLE = connections.Role("schema", autocommit=False)
READ_ROLE = connections.Role("schema")

ENGINE = "ujobs_bridge"

log = logging.getLogger("ujobs.schema")

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Adoption:
    """Migration ``version`` of a set did what ``from_part``'s ``from_version`` (recorded as
    ``from_name``) did before the split: where that record exists, it is recorded, not run."""

    version: int
    from_part: str
    from_version: int
    from_name: str


@dataclass(frozen=True, slots=True)
class MigrationSet:
    """One part of the schema: the ``NNNN_name.sql`` files of ``folder``, recorded under
    ``name``, applied after the engine's and after every part in ``requires``."""

    name: str
    folder: Path
    requires: tuple[str, ...] = ()
    adopts: tuple[Adoption, ...] = ()

    def adoption(self, version: int) -> Adoption | None:
        return next((a for a in self.adopts if a.version == version), None)


ENGINE_SET = MigrationSet(ENGINE, Path(__file__).resolve().parent / "migrations")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: LiteralString
    part: str = ENGINE

    @property
    def label(self) -> str:
        return f"{self.part} {self.version:04d}_{self.name}"


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    version: int
    name: str
    applied_at: datetime
    part: str = ENGINE


@dataclass(frozen=True, slots=True)
class Step:
    """A pending migration, and the older record that makes it an adoption (``None``: it runs)."""

    migration: Migration
    adopted: Adoption | None


# ------------------------------------------------------------------------------ the sets


def _invalid(where: object, problem: str) -> SchemaError:
    return SchemaError(
        f"{where}: {problem}",
        code=ErrorCode.MIGRATION_INVALID,
        hint="fix the package's db/migrations/part.toml or its ujobs_bridge.schema entry point",
    )


def _contributed(entry: metadata.EntryPoint) -> MigrationSet | None:
    """The set an entry point names (``name = "package.module"``: that module's ``migrations/``
    folder and its ``part.toml``), found WITHOUT importing the package: a plain job app's worker
    checks the schema and must not pay for Celery's import. ``None`` (logged) if the package is
    gone though its metadata stays."""
    top, *rest = entry.value.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        log.warning("ujobs.schema.part_unavailable: %s (%s not found)", entry.name, top)
        return None
    folder = Path(next(iter(spec.submodule_search_locations)), *rest, "migrations")
    described = folder / "part.toml"
    try:
        doc = tomllib.loads(described.read_text(encoding="utf-8"))
        requires = tuple(str(r) for r in doc.get("requires", []))
        adopts = tuple(
            Adoption(int(a["version"]), str(a["from"][0]), int(a["from"][1]), str(a["from"][2]))
            for a in doc.get("adopts", [])
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise _invalid(described, f"cannot be read as a schema part ({exc})") from exc
    return MigrationSet(entry.name, folder, requires, adopts)


@functools.cache
def _installed() -> tuple[MigrationSet, ...]:
    """The engine's set and each contributed one, in dependency order (ties by name). A set
    whose required part is not installed is left out (logged), like an entry that cannot load."""
    found: dict[str, MigrationSet] = {ENGINE: ENGINE_SET}
    for entry in plugins.entries(plugins.SCHEMA_GROUP):
        contributed = _contributed(entry)
        if contributed is not None and entry.name != ENGINE:
            found[entry.name] = contributed
    ordered: list[MigrationSet] = []
    placed: set[str] = set()
    while True:
        waiting = [s for s in found.values() if s.name not in placed]
        ready = [s for s in waiting if all(r in placed for r in _needs(s))]
        if not ready:
            break
        first = min(ready, key=lambda s: (s.name != ENGINE, s.name))
        ordered.append(first)
        placed.add(first.name)
    for left_out in waiting:
        missing = [r for r in _needs(left_out) if r not in placed]
        if any(r in found for r in missing):
            raise _invalid(
                left_out.folder, f"parts {sorted(found.keys() - placed)} require each other"
            )
        log.warning("ujobs.schema.part_unavailable: %s (requires %s)", left_out.name, missing)
    return tuple(ordered)


def _needs(migration_set: MigrationSet) -> tuple[str, ...]:
    return (
        migration_set.requires
        if migration_set.name == ENGINE
        else (ENGINE, *migration_set.requires)
    )


def sets(parts: Iterable[str] | None = None) -> list[MigrationSet]:
    """The installed sets in the order they are applied; with ``parts``, only those and the
    parts they require (an unknown name is refused)."""
    installed = list(_installed())
    if parts is None:
        return installed
    by_name = {s.name: s for s in installed}
    wanted: set[str] = set()
    todo = list(parts)
    while todo:
        name = todo.pop()
        if name not in by_name:
            raise SchemaError(
                f"there is no schema part {name!r} (installed: {', '.join(by_name)})",
                code=ErrorCode.SCHEMA_PART_UNKNOWN,
                hint="name one of the installed parts, or install the package that provides it",
            )
        if name not in wanted:
            wanted.add(name)
            todo.extend(_needs(by_name[name]))
    return [s for s in installed if s.name in wanted]


def migrations_of(migration_set: MigrationSet) -> list[Migration]:
    """The set's migrations, in order; gaps and bad names refused."""
    found: list[Migration] = []
    for entry in migration_set.folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE.match(entry.name)
        if match is None:
            raise SchemaError(
                f"migration file {entry.name!r} of {migration_set.name} is not named NNNN_name.sql",
                code=ErrorCode.MIGRATION_INVALID,
                hint="rename it to a four-digit number, an underscore and a lowercase name",
            )
        # Shipped with the package: vouched for as a literal.
        text: LiteralString = entry.read_text(encoding="utf-8")
        found.append(Migration(int(match.group(1)), match.group(2), text, migration_set.name))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise SchemaError(
                f"migration {migration.label} follows a gap (expected {expected:04d})",
                code=ErrorCode.MIGRATION_INVALID,
                hint="number each part's migrations consecutively from 0001",
            )
    return found


def available(parts: Iterable[str] | None = None) -> list[Migration]:
    """Every installed part's migrations, in the order an upgrade applies them."""
    return [m for s in sets(parts) for m in migrations_of(s)]


# ------------------------------------------------------------------------------ the record


def applied(conn: psycopg.Connection[Any]) -> list[AppliedMigration]:
    """What ``x_schema_version`` records, every part (none if it does not exist yet)."""
    row = conn.execute(q("schema_table_exists")).fetchone()
    if row is None or not row[0]:
        return []
    try:
        parted = conn.execute(q("schema_version_has_parts")).fetchone()
        has_parts = parted is not None and bool(parted[0])
        statement = q("schema_versions") if has_parts else q("schema_versions_unparted")
        rows = conn.execute(statement).fetchall()
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SchemaError(
            "this role may not read the schema version (x_schema_version)",
            code=ErrorCode.SCHEMA_PRIVILEGE,
            hint="as the schema owner, run `ujobs-bridge db grant ROLE` for this role",
        ) from exc
    return [AppliedMigration(int(r[1]), str(r[2]), r[3], str(r[0])) for r in rows]


Records = dict[tuple[str, int], str]


def _records(done: Iterable[AppliedMigration]) -> Records:
    return {(a.part, a.version): a.name for a in done}


def _refuse_newer(chosen: Sequence[MigrationSet], records: Records) -> None:
    """A part recorded further than this package ships is refused; parts this installation does
    not have (a package uninstalled) are left alone."""
    for migration_set in chosen:
        newest = max((m.version for m in migrations_of(migration_set)), default=0)
        at = max((v for p, v in records if p == migration_set.name), default=0)
        if at > newest:
            raise SchemaError(
                f"the database schema's part {migration_set.name} is at version {at}, "
                f"newer than this package ({newest})",
                code=ErrorCode.SCHEMA_NEWER,
                hint="upgrade ujobs-bridge (and the package of that part) on this machine to the "
                "version that migrated the database",
            )


def _step(migration_set: MigrationSet, migration: Migration, records: Records) -> Step:
    adoption = migration_set.adoption(migration.version)
    if adoption is not None and records.get((adoption.from_part, adoption.from_version)) == (
        adoption.from_name
    ):
        return Step(migration, adoption)
    return Step(migration, None)


def _pending(chosen: Sequence[MigrationSet], records: Records) -> list[Step]:
    """The steps still to take, as an upgrade would take them now (read-only)."""
    return [
        _step(s, m, records)
        for s in chosen
        for m in migrations_of(s)
        if (s.name, m.version) not in records
    ]


def upgrade_steps(dsn: str, parts: Iterable[str] | None = None) -> list[Step]:
    """Apply every pending migration of every installed part (with ``parts``: of those and the
    parts they require) in one locked transaction; returns the steps taken, adoptions included
    (empty if up to date)."""
    chosen = sets(parts)
    taken: list[Step] = []
    with connections.connect(dsn, MIGRATE_ROLE) as conn, conn.transaction():
        conn.execute(q("schema_lock"))
        conn.execute(q("schema_version_table"))
        conn.execute(q("schema_version_parts"))
        records = _records(applied(conn))
        _refuse_newer(chosen, records)
        for migration_set in chosen:
            for migration in migrations_of(migration_set):
                if (migration_set.name, migration.version) in records:
                    continue
                step = _step(migration_set, migration, records)
                if step.adopted is None:
                    conn.execute(migration.sql)
                conn.execute(
                    q("schema_version_record"),
                    {"part": migration.part, "version": migration.version, "name": migration.name},
                )
                records[(migration.part, migration.version)] = migration.name
                taken.append(step)
    return taken


def upgrade(dsn: str, parts: Iterable[str] | None = None) -> list[Migration]:
    """Apply every pending migration; returns what this call recorded (empty if up to date)."""
    return [step.migration for step in upgrade_steps(dsn, parts)]


def pending_steps(conn: psycopg.Connection[Any]) -> list[Step]:
    """What ``upgrade`` would do now, read without DDL; a part newer than this package refused."""
    chosen = sets()
    records = _records(applied(conn))
    _refuse_newer(chosen, records)
    return _pending(chosen, records)


def check(dsn: str) -> list[Migration]:
    """The migrations ``dsn`` lacks, read without DDL; a schema newer than this package refused."""
    with connections.connect(dsn, READ_ROLE) as conn:
        return [step.migration for step in pending_steps(conn)]


def require_current(dsn: str, upgrade_command: str | None = None) -> None:
    """Refuse to run against a schema that is missing migrations (read-only: never DDL). The
    hint names the command that upgrades this database (``upgrade_command``, else ``--dsn``)."""
    missing = check(dsn)
    if missing:
        command = upgrade_command or upgrade_command_for(dsn)
        raise SchemaError(
            f"the database {mask_dsn(dsn)} is missing {len(missing)} migration(s), "
            f"first {missing[0].label}",
            hint=f"run `{command}` as the schema owner "
            "(or set UJOBS_AUTO_UPGRADE=1 to let this process apply them)",
        )


class Duty(enum.StrEnum):
    """What a database role is for (``db grant --producer|--worker|--reader|--operator``).

    producer: enqueue, and read a job by its id; no row privilege on any table (both through
    SECURITY DEFINER functions). worker: claim, settle, steps, heartbeats, presence, schedules,
    drains: row privileges on every table but the schema's record. reader: select on every
    table (the read-only dashboard, ``/metrics``, the CLI's reads). operator: a reader that may
    also requeue, cancel and discard (through functions, not row privileges). No duty may change
    the schema or its record: DDL stays the owner's."""

    PRODUCER = "producer"
    WORKER = "worker"
    READER = "reader"
    OPERATOR = "operator"


# What `db grant ROLE` (no duty named) gives: an application role that enqueues and works.
APPLICATION = frozenset({Duty.PRODUCER, Duty.WORKER})

SCHEMA_RECORD = "x_schema_version"


@dataclass(frozen=True, slots=True)
class Granted:
    """What one grant left ``role`` holding."""

    role: str
    duties: frozenset[Duty]
    relations: list[str]  # those it holds any privilege on
    functions: list[str]


def grant(dsn: str, role: str, duties: Iterable[Duty] = APPLICATION) -> Granted:
    """Give ``role`` exactly what ``duties`` need on every part's relations and functions
    (connect, schema usage, then per relation and per SECURITY DEFINER function: what any duty
    named needs, and nothing it held before). Idempotent; run it again after an upgrade that
    adds tables, naming all the role's duties at once."""
    wanted = frozenset(duties)
    if not wanted:
        raise SchemaError(
            f"no duty named for role {role!r}",
            code=ErrorCode.CONFIG_INVALID,
            hint="name one or more of --producer, --worker, --reader, --operator",
        )
    with connections.connect(dsn, MIGRATE_ROLE) as conn, conn.transaction():
        exists = conn.execute(q("schema_role_exists"), {"role": role}).fetchone()
        if exists is None or not exists[0]:
            raise SchemaError(
                f"there is no role {role!r} in this cluster",
                code=ErrorCode.ROLE_NOT_FOUND,
                hint=f"create it first (create role {role} login), then run `db grant` again",
            )
        owns = conn.execute(q("schema_role_owns"), {"role": role}).fetchone()
        if owns is not None and owns[0]:
            raise SchemaError(
                f"{role!r} owns the schema: a grant would take its own privileges away",
                code=ErrorCode.ROLE_IS_OWNER,
                hint="the owner needs no grant; name the roles the processes connect as",
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
        relations: list[str] = []
        for relname, is_sequence in conn.execute(q("schema_grantable_relations")).fetchall():
            relation = sql.Identifier(relname)
            conn.execute(sql.SQL(q("schema_revoke_relation")).format(relation=relation, role=who))
            statement = _relation_grant(str(relname), bool(is_sequence), wanted)
            if statement is None:
                continue
            conn.execute(sql.SQL(statement).format(relation=relation, role=who))
            relations.append(str(relname))
        functions: list[str] = []
        acting_as = wanted | ({Duty.READER} if Duty.OPERATOR in wanted else set())
        for proname, serves in conn.execute(q("schema_duty_functions")).fetchall():
            function = sql.Identifier(proname)
            conn.execute(sql.SQL(q("schema_revoke_function_public")).format(function=function))
            conn.execute(sql.SQL(q("schema_revoke_function")).format(function=function, role=who))
            if acting_as & {d for d in Duty if d.value in (serves or [])}:
                conn.execute(
                    sql.SQL(q("schema_grant_function")).format(function=function, role=who)
                )
                functions.append(str(proname))
    return Granted(role, wanted, relations, functions)


def _relation_grant(
    relname: str, is_sequence: bool, duties: frozenset[Duty]
) -> LiteralString | None:
    """The grant statement ``duties`` need on one relation (``None``: none). Every duty reads the
    schema's record (the runtime's check) and none writes it."""
    if relname == SCHEMA_RECORD:
        return q("schema_grant_table_read")
    if Duty.WORKER in duties:
        return q("schema_grant_sequence") if is_sequence else q("schema_grant_table")
    if duties & {Duty.READER, Duty.OPERATOR} and not is_sequence:
        return q("schema_grant_table_read")
    return None
