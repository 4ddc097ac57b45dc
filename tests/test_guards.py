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
from ujobs_bridge.db.sql import QUERIES, parse

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["ujobs_bridge", "celery_compat", "migrate"]
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
SQL_FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.sql"))
SIZE_CEILING = 520  # lines; split a file along its seam well before this


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
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_TEXT.match(node.value):
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
def test_every_module_opens_with_a_docstring_and_stays_small(path: Path) -> None:
    text = path.read_text()
    if path.name == "__init__.py" and not text.strip():
        return
    assert ast.get_docstring(ast.parse(text)), f"{path} needs a docstring: why it exists, what it is not"
    assert len(text.splitlines()) <= SIZE_CEILING, f"{path} is over {SIZE_CEILING} lines: split it along its seam"


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
