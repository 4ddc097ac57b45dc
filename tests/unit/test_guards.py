"""Source-reading guards: rules a grep can check, enforced as tests rather than review notes.

The file lists are DISCOVERED from the package directories, so a new module cannot opt out of
a rule by not being listed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from celery_compat.db import QUERIES as CELERY_QUERIES
from migrate.db import QUERIES as MIGRATE_QUERIES
from ujobs_bridge._internal.db.sql import QUERIES, parse

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["ujobs_bridge", "celery_compat", "migrate"]
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
SQL_FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.sql"))


def _strip_sql_comments(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda p: p.name)
def test_no_select_star_or_returning_star(path: Path) -> None:
    text = _strip_sql_comments(path.read_text()).lower()
    assert not re.search(r"select\s+\*|returning\s+\*", text)


SQL_TEXT = re.compile(
    r"^\s*(select\s.+\sfrom\b|insert\s+into\b|update\s+\w+\s+set\b|delete\s+from\b"
    r"|create\s+(table|index|unique|function|trigger)\b|alter\s+table\b|drop\s+(table|index)\b"
    r"|listen\s+\w+\s*$|notify\s+\w+)",
    re.IGNORECASE | re.DOTALL,
)


def test_the_sql_detector_tells_sql_from_prose() -> None:
    assert SQL_TEXT.match("delete from x_jobs where id = 1")
    assert SQL_TEXT.match("select id from x_jobs")
    assert SQL_TEXT.match("listen x_jobs_ready")
    assert not SQL_TEXT.match("Delete everything expired at cutoff from every target")
    assert not SQL_TEXT.match("drop anchor=, or use every= instead of cron=")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_holds_no_sql_text(path: Path) -> None:
    """SQL lives in each package's db/sql/*.sql and migrations/; Python only names statements."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and SQL_TEXT.match(node.value)
        ):
            raise AssertionError(f"{path.name}:{node.lineno} holds SQL text: {node.value[:60]!r}")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sql_built_from_strings(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("execute", "executemany")
            and node.args
            and isinstance(node.args[0], ast.JoinedStr | ast.BinOp)
        ):
            raise AssertionError(f"{path.name}:{node.lineno} builds SQL from strings")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_opens_with_a_docstring(path: Path) -> None:
    """A module says why it exists and what it is not. Its length is not checked: a file is split
    where its concerns part, not at a line count."""
    text = path.read_text()
    if path.name == "__init__.py" and not text.strip():
        return
    assert ast.get_docstring(ast.parse(text)), (
        f"{path} needs a docstring: why it exists, what it is not"
    )


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unpickling_and_no_imports_by_name_from_data(path: Path) -> None:
    text = path.read_text()
    assert not re.search(r"pickle\.loads?\(|yaml\.load\(|yaml\.unsafe_load|\beval\(", text)
    # importlib is allowed only where the operator's -A names a module
    if "importlib.import_module" in text:
        assert path.name == "loading.py", f"{path} imports code by name"


def test_queries_file_refuses_duplicate_and_empty_blocks() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse("-- a --\nselect 1\n-- a --\nselect 2\n")
    with pytest.raises(ValueError, match="no statement"):
        parse("-- a --\n-- only a comment\n")
    assert "job_claim" in QUERIES


def test_every_named_query_is_used() -> None:
    code = "\n".join(p.read_text() for p in SOURCES)
    every = [*QUERIES, *CELERY_QUERIES, *MIGRATE_QUERIES]
    unused = [name for name in every if f'q("{name}")' not in code]
    assert not unused, f"sql blocks nothing runs: {unused}"


# ---------------------------------------------------------------------------- the SQL seam
# Only a package's ``db`` modules run SQL: they alone call ``q(...)`` or ``.execute(...)`` /
# ``.executemany(...)`` with a statement (a call with no argument, like a Redis pipeline's
# ``execute()``, is not SQL). Connections are opened only by ``ujobs_bridge/_internal/db/connections.py``.
DB_FOLDERS = ("ujobs_bridge/_internal/db/", "celery_compat/db/", "migrate/db/")

# Files that run SQL outside their package's ``db`` folder: none. A file listed here that no
# longer runs SQL fails ``test_the_sql_allowlist_is_not_stale``, so the list cannot rot.
SQL_ALLOWLIST: frozenset[str] = frozenset()

# Connections opened outside ``db/connections.py``; the same rule, the same shrinking list.
CONNECT_ALLOWLIST: frozenset[str] = frozenset()
CONNECTIONS_MODULE = "ujobs_bridge/_internal/db/connections.py"


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _in_db_folder(path: Path) -> bool:
    return _relative(path).startswith(DB_FOLDERS)


def sql_calls(source: str) -> list[int]:
    """Lines that call ``q(...)`` or execute a statement (``.execute``/``.executemany`` with an
    argument)."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Name) and func.id == "q") or (
            isinstance(func, ast.Attribute)
            and func.attr in ("execute", "executemany")
            and node.args
        ):
            found.append(node.lineno)
    return sorted(set(found))


def connection_opens(source: str) -> list[int]:
    """Lines that open a connection or a pool directly (``psycopg.connect``, ``*.connect`` of a
    psycopg connection class, ``ConnectionPool(...)``)."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("ConnectionPool", "AsyncConnectionPool"):
            found.append(node.lineno)
        elif isinstance(func, ast.Attribute):
            owner = func.value
            named = (
                owner.id
                if isinstance(owner, ast.Name)
                else owner.attr
                if isinstance(owner, ast.Attribute)
                else ""
            )
            if (
                func.attr == "connect" and named in ("psycopg", "Connection", "AsyncConnection")
            ) or func.attr in ("ConnectionPool", "AsyncConnectionPool"):
                found.append(node.lineno)
    return found


def test_the_seam_detectors_find_what_they_look_for() -> None:
    assert sql_calls('conn.execute(q("job_get"), {})') == [1]
    assert sql_calls("cur.executemany(statement, rows)") == [1]
    assert sql_calls("pipe.execute()") == []  # a Redis pipeline: not SQL
    assert connection_opens("psycopg.connect(dsn, autocommit=True)") == [1]
    assert connection_opens("ConnectionPool(dsn, open=True)") == [1]
    assert connection_opens("connections.connect(dsn, ROLE)") == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_sql_runs_only_in_a_packages_db_modules(path: Path) -> None:
    if _in_db_folder(path) or _relative(path) in SQL_ALLOWLIST:
        return
    lines = sql_calls(path.read_text())
    assert not lines, (
        f"{_relative(path)} runs SQL at line(s) {lines}: add a function to the package's db "
        "module (it takes the connection and typed parameters) and call that"
    )


def test_the_sql_allowlist_is_not_stale() -> None:
    for name in sorted(SQL_ALLOWLIST):
        path = ROOT / name
        assert path.exists(), f"{name} is allowlisted but gone: drop it from SQL_ALLOWLIST"
        assert sql_calls(path.read_text()), f"{name} no longer runs SQL: drop it from SQL_ALLOWLIST"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_connections_are_opened_only_by_the_connection_policy(path: Path) -> None:
    if _relative(path) in CONNECT_ALLOWLIST or _relative(path) == CONNECTIONS_MODULE:
        return
    lines = connection_opens(path.read_text())
    assert not lines, (
        f"{_relative(path)} opens a connection at line(s) {lines}: use "
        "ujobs_bridge._internal.db.connections (connect, pool or Reconnecting with a Role)"
    )


def test_the_connection_allowlist_is_not_stale() -> None:
    for name in sorted(CONNECT_ALLOWLIST):
        path = ROOT / name
        assert path.exists(), f"{name} is allowlisted but gone: drop it from CONNECT_ALLOWLIST"
        assert connection_opens(path.read_text()), f"{name} no longer opens connections: drop it"


def test_the_test_kits_claim_by_id_sets_exactly_what_the_workers_claim_sets() -> None:
    """``testing_job_claim`` (``perform``) picks its one row by id, whatever its place in line;
    from the ``update`` on it must write the same columns as ``job_claim``, or ``perform`` would
    test a different claim than the worker makes."""

    def claim_write(name: str) -> str:
        statement = QUERIES[name]
        return " ".join(statement[statement.index("update x_jobs as j") :].split())

    assert claim_write("testing_job_claim") == claim_write("job_claim")
