"""The schema's parts: the engine's migrations, then celery_compat's, then migrate's.

The promises: a database an older ujobs-bridge made (every table in the engine's migrations,
the record without parts) and an empty one, both upgraded by this code, end IDENTICAL under
``pg_dump --schema-only`` (columns and their order, constraints, indexes, functions, triggers,
comments, grants); the engine's own part creates nothing of the packages above it; each part's
``current_schema.sql`` is what its migrations make.

The older code is read from git at a fixed commit of main (the last one before the split), the
migration files and the runner's bookkeeping statements alike, and applied the way that runner
applied them.
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from conftest import ADMIN_DSN, _dsn_for
from ujobs_bridge._internal.db import dump, schema
from ujobs_bridge._internal.db.sql import parse
from ujobs_bridge.errors import ErrorCode, SchemaError

ROOT = Path(__file__).resolve().parents[2]
# main before the split: 21 engine migrations, celery's and migrate's tables among them.
OLD_COMMIT = "776584713685f8e1c4a061f4c05654a9f9c619bd"
OLD_FOLDER = "ujobs_bridge/db/migrations"
# (part, version) adopted when the old engine had applied (version, name) of its own
ADOPTIONS = {
    ("celery_compat", 1): (4, "celery"),
    ("celery_compat", 2): (5, "rate_limits"),
    ("celery_compat", 3): (10, "celery_events"),
    ("celery_compat", 4): (13, "send_keys"),
    ("celery_compat", 5): (18, "result_status"),
    ("migrate", 1): (6, "migrate"),
}


def git(*args: str) -> str:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("these tests read the old migrations with git: run them from a git checkout")
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, (
        f"git {' '.join(args)} failed: {done.stderr}\n"
        f"hint: the checkout needs main's history up to {OLD_COMMIT} (git fetch --unshallow)"
    )
    return done.stdout


def old_migrations() -> list[tuple[int, str, str]]:
    """(version, name, text) of every engine migration at OLD_COMMIT, in order."""
    found = []
    for path in git("ls-tree", "--name-only", OLD_COMMIT, f"{OLD_FOLDER}/").split():
        match = re.fullmatch(rf"{OLD_FOLDER}/(\d{{4}})_([a-z0-9_]+)\.sql", path)
        assert match, path
        found.append((int(match.group(1)), match.group(2), git("show", f"{OLD_COMMIT}:{path}")))
    assert [v for v, _, _ in found] == list(range(1, 22))
    return found


def engine_since_split() -> set[tuple[str, int]]:
    """(part, version) of the engine's migrations added after OLD_COMMIT's 21: an old
    database runs them (nothing to adopt)."""
    return {(m.part, m.version) for m in schema.available([schema.ENGINE]) if m.version > 21}


def others_since_split() -> set[tuple[str, int]]:
    """(part, version) of the other parts' migrations that adopt nothing (added after the
    split): an old database runs them too."""
    return {
        (m.part, m.version)
        for m in schema.available()
        if m.part != schema.ENGINE and (m.part, m.version) not in ADOPTIONS
    }


def old_upgrade(dsn: str, through: int) -> None:
    """What the old runner did: one transaction, its lock, its record table, every migration up
    to ``through`` with its record."""
    statements = parse(git("show", f"{OLD_COMMIT}:ujobs_bridge/db/sql/schema.sql"))
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute(statements["schema_lock"])
        conn.execute(statements["schema_version_table"])
        for version, name, text in old_migrations():
            if version <= through:
                conn.execute(text)  # type: ignore[arg-type]  # read from git: vouched for
                conn.execute(
                    statements["schema_version_record"], {"version": version, "name": name}
                )


@pytest.fixture
def new_database() -> Iterator[Callable[[], str]]:
    """Makes empty databases (``ujb_schema_*``) and drops them after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"ujb_schema_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        made.append(name)
        return _dsn_for(name)

    yield make
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        for name in made:
            admin.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))


@pytest.fixture
def app_role() -> Iterator[str]:
    """A login role the test grants to; dropped after the databases that name it."""
    role = f"ujb_schema_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
    yield role
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def records(dsn: str) -> dict[tuple[str, int], str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select part, version, name from x_schema_version").fetchall()
    return {(part, version): name for part, version, name in rows}


def assert_same_dump(a: str, b: str) -> None:
    if a != b:
        diff = "\n".join(difflib.unified_diff(a.splitlines(), b.splitlines(), "A", "B", n=2))
        raise AssertionError(f"the schemas differ (pg_dump --schema-only):\n{diff[:6000]}")


@pytest.fixture(autouse=True)
def _pg_dump_present() -> None:
    if shutil.which("pg_dump") is None:
        pytest.fail("pg_dump is needed (Debian: postgresql-client)")


# -------------------------------------------------------------- old database == new database


@pytest.mark.parametrize("through", [21, 13, 12, 5, 3])
def test_a_database_the_old_engine_made_ends_identical_to_a_new_one(
    through: int, app_role: str, new_database: Callable[[], str]
) -> None:
    """``through``: the engine version the old code left the database at (21: current main;
    12: celery's first tables but not its send keys; 3: before any of them)."""
    old, new = new_database(), new_database()
    old_upgrade(old, through)
    taken = schema.upgrade_steps(old)
    schema.upgrade(new)

    adopted = {(s.migration.part, s.migration.version) for s in taken if s.adopted is not None}
    assert adopted == {key for key, (version, _) in ADOPTIONS.items() if version <= through}
    ran = {(s.migration.part, s.migration.version) for s in taken if s.adopted is None}
    assert ran == {(m.part, m.version) for m in schema.available()} - adopted - {
        (schema.ENGINE, v) for v in range(1, through + 1)
    }
    assert schema.check(old) == [] and schema.upgrade(old) == []
    assert set(records(old)) == set(records(new))  # the same (part, version) recorded

    # grants too: `db grant` covers every part's tables, on both
    schema.grant(old, app_role)
    schema.grant(new, app_role)
    dumped_old, dumped_new = dump.pg_dump(old), dump.pg_dump(new)
    assert_same_dump(dumped_old, dumped_new)
    for needle in ("x_celery_tasks", "x_migrate_quarantine", "x_jobs_insert", app_role):
        assert needle in dumped_new


def test_the_comparison_fails_on_a_changed_column_or_function(
    new_database: Callable[[], str],
) -> None:
    dsn = new_database()
    schema.upgrade(dsn)
    before = dump.pg_dump(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("alter table x_celery_results alter column status set default 'PENDING'")
    with pytest.raises(AssertionError, match="status"):
        assert_same_dump(before, dump.pg_dump(dsn))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("alter table x_celery_results alter column status drop default")
        assert_same_dump(before, dump.pg_dump(dsn))
        conn.execute(
            "create or replace function x_job_claimable_empty() returns trigger language plpgsql"
            " as $fn$ begin return null; end $fn$"
        )
    with pytest.raises(AssertionError, match="x_job_claimable"):
        assert_same_dump(before, dump.pg_dump(dsn))


def test_racing_upgrades_of_an_old_database_adopt_once(new_database: Callable[[], str]) -> None:
    dsn = new_database()
    old_upgrade(dsn, 21)
    results: list[list[schema.Step]] = []
    threads = [
        threading.Thread(target=lambda: results.append(schema.upgrade_steps(dsn))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    later = engine_since_split() | others_since_split()
    assert sorted(len(r) for r in results) == [0, 0, len(ADOPTIONS) + len(later)]
    # the other parts' tables are adopted; the engine's migrations since the split run
    assert all(
        (s.adopted is None) == ((s.migration.part, s.migration.version) in later)
        for r in results
        for s in r
    )


# -------------------------------------------------------------- each part owns its objects


def test_the_engine_part_alone_makes_nothing_of_the_packages_above(
    new_database: Callable[[], str],
) -> None:
    dsn = new_database()
    taken = schema.upgrade(dsn, [schema.ENGINE])
    assert {m.part for m in taken} == {schema.ENGINE}
    with psycopg.connect(dsn) as conn:
        relations = conn.execute(
            "select relname from pg_class where relnamespace = current_schema()::regnamespace"
            " and (relname like 'x\\_celery%' or relname like 'x\\_migrate%'"
            " or relname like 'x\\_rate\\_limits%' or relname like '%celery%')"
        ).fetchall()
        functions = conn.execute(
            "select proname from pg_proc where pronamespace = current_schema()::regnamespace"
            " and (prosrc ilike '%celery%' or prosrc ilike '%x\\_migrate%'"
            " or prosrc ilike '%x\\_rate\\_limits%')"
        ).fetchall()
    assert relations == [] and functions == []
    # nor does any engine migration name them outside its comments
    for path in sorted((ROOT / "ujobs_bridge/_internal/db/migrations").glob("*.sql")):
        code = re.sub(r"--[^\n]*", "", path.read_text())
        assert not re.search(r"x_celery|x_migrate|x_rate_limits|celery", code), path.name
    # the rest comes with the other parts, in order
    assert [m.part for m in schema.upgrade(dsn)] == [
        m.part for m in schema.available() if m.part != schema.ENGINE
    ] and {m.part for m in schema.available()} == {schema.ENGINE, "celery_compat", "migrate"}
    assert schema.check(dsn) == []


def test_parts_are_found_by_entry_point_without_importing_their_packages() -> None:
    probe = (
        "import sys\n"
        "from ujobs_bridge._internal.db import schema\n"
        "print([s.name for s in schema.sets()], [s.requires for s in schema.sets()])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('celery_compat', 'migrate', 'celery')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    names, imported = done.stdout.splitlines()
    assert names == "['ujobs_bridge', 'celery_compat', 'migrate'] [(), (), ('celery_compat',)]"
    assert imported == "[]"


def test_asking_for_one_part_brings_the_parts_it_requires() -> None:
    assert [s.name for s in schema.sets(["migrate"])] == [
        "ujobs_bridge",
        "celery_compat",
        "migrate",
    ]
    assert [s.name for s in schema.sets(["ujobs_bridge"])] == ["ujobs_bridge"]
    with pytest.raises(SchemaError) as unknown:
        schema.sets(["flower"])
    assert unknown.value.code is ErrorCode.SCHEMA_PART_UNKNOWN and unknown.value.hint


# -------------------------------------------------------------- check, status, refusal


def test_a_part_newer_than_its_package_is_refused_by_name(new_database: Callable[[], str]) -> None:
    dsn = new_database()
    schema.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "insert into x_schema_version (part, version, name) values ('celery_compat', 99, 'x')"
        )
        # a part this installation does not have is left alone
        conn.execute("insert into x_schema_version (part, version, name) values ('other', 9, 'y')")
    for call in (schema.check, schema.upgrade):
        with pytest.raises(SchemaError) as newer:
            call(dsn)
        assert newer.value.code is ErrorCode.SCHEMA_NEWER and "celery_compat" in newer.value.message


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_old_database_is_checked_read_only_then_adopted_by_db_upgrade(
    new_database: Callable[[], str],
) -> None:
    dsn = new_database()
    old_upgrade(dsn, 21)
    missing = schema.check(dsn)  # read-only: the old record keeps its old shape
    assert [(m.part, m.version) for m in missing] == sorted(engine_since_split()) + sorted(
        set(ADOPTIONS) | others_since_split()
    )
    with psycopg.connect(dsn) as conn:
        columns = conn.execute(
            "select attname from pg_attribute where attrelid = 'x_schema_version'::regclass"
            " and attnum > 0 order by attnum"
        ).fetchall()
    assert [c[0] for c in columns] == ["version", "name", "applied_at"]
    status = json.loads(cli("db", "status", "--dsn", dsn, "--json").stdout)
    later = len(engine_since_split())
    assert status["parts"]["ujobs_bridge"] == {
        "version": 21,
        "latest": 21 + later,
        "pending": later,
    }
    celery_latest = max(
        m.version for m in schema.available(["celery_compat"]) if m.part == "celery_compat"
    )
    assert status["parts"]["celery_compat"] == {
        "version": 0,
        "latest": celery_latest,
        "pending": celery_latest,
    }
    assert status["pending"][later]["adopts"] == "ujobs_bridge 0004_celery"

    upgraded = cli("db", "upgrade", "--dsn", dsn)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "celery_compat: adopted 0001_celery (already made by ujobs_bridge 0004_celery" in (
        upgraded.stdout
    )
    assert "migrate: adopted 0001_quarantine" in upgraded.stdout
    # nothing of the other parts runs again; only the migrations since the split run
    applied = [line for line in upgraded.stdout.splitlines() if "applied" in line]
    since = engine_since_split() | others_since_split()
    assert applied == [
        f"{m.part}: applied {m.version:04d}_{m.name}"
        for m in schema.available()
        if (m.part, m.version) in since
    ]
    after = json.loads(cli("db", "status", "--dsn", dsn, "--json").stdout)
    migrate_latest = max(m.version for m in schema.available(["migrate"]) if m.part == "migrate")
    assert after["pending"] == [] and after["parts"]["migrate"]["version"] == migrate_latest
    # the engine's old records keep their old names
    assert records(dsn)[(schema.ENGINE, 4)] == "celery"


def test_pending_steps_say_what_an_upgrade_would_run_or_adopt(
    new_database: Callable[[], str],
) -> None:
    dsn = new_database()
    old_upgrade(dsn, 12)
    with psycopg.connect(dsn) as conn:
        steps = schema.pending_steps(conn)
    adopted = [(s.migration.part, s.migration.version) for s in steps if s.adopted is not None]
    assert adopted == [
        ("celery_compat", 1),
        ("celery_compat", 2),
        ("celery_compat", 3),
        ("migrate", 1),
    ]
    assert steps[0].migration.label == "ujobs_bridge 0013_moved_to_celery_compat"
    for part in schema.sets():
        versions = [m.version for m in schema.migrations_of(part)]
        assert versions == list(range(1, len(versions) + 1)) and versions, part.name
    objects = dump.entries(dump.pg_dump(dsn, "--no-privileges"))
    assert "Name: x_celery_tasks; Type: TABLE; Schema: public" in objects
    assert objects["Name: x_schema_version; Type: TABLE; Schema: public"].startswith(
        "CREATE TABLE public.x_schema_version"
    )


# -------------------------------------------------------------- current_schema.sql


def test_each_parts_current_schema_file_is_what_its_migrations_make() -> None:
    generated = dump.generate(ADMIN_DSN)
    assert [p.part for p in generated] == ["ujobs_bridge", "celery_compat", "migrate"]
    for part in generated:
        assert not part.stale(), (
            f"{part.path} is not what the migrations of {part.part} make: regenerate it with "
            f"`ujobs-bridge db schema --write --part {part.part} --dsn {ADMIN_DSN}`"
        )
    texts: dict[str, Any] = {p.part: p.path.read_text() for p in generated}
    assert "CREATE TABLE public.x_celery_tasks" in texts["celery_compat"]
    assert "x_jobs_celery_task_idx" in texts["celery_compat"]
    assert "x_celery" not in texts["ujobs_bridge"] and "x_migrate" not in texts["celery_compat"]
    assert "CREATE FUNCTION public.x_jobs_insert" in texts["ujobs_bridge"]


def test_db_schema_check_through_the_cli() -> None:
    result = cli("db", "schema", "--check", "--part", "migrate", "--dsn", ADMIN_DSN)
    assert result.returncode == 0, result.stderr
    assert "migrate:" in result.stdout and "is current" in result.stdout
