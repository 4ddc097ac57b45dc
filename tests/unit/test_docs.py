"""The documentation cannot rot: the site builds with ``mkdocs build --strict`` (a broken link, a
missing anchor or a page left out of the navigation fails it), and the reference holds every
entry the code has: every command of the CLI (its synopsis; mkdocs-click renders the options from
the commands themselves), every environment variable the packages read, every Celery app setting
celery_compat reads, every ``WorkerConfig`` field and every ``UJ_*`` error code with a hint. Each
completeness check is shown failing when an entry is removed from its page. The README stays a
front door: short, its links pointing at files that exist; every fence of the README and the docs
names its language, and every snippet (Python or shell) is run by
``tests/integration/test_doc_snippets.py`` or carries a marker with the reason it cannot run
(``tests/doc_snippets.py``: the convention).

Needs no service: the build runs once per session (the one subprocess here); the rest reads files
and walks the click commands and the source's syntax trees."""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import doc_snippets
import pytest
from click.testing import CliRunner

from ujobs_bridge import WorkerConfig, __version__
from ujobs_bridge._internal.cli import cli
from ujobs_bridge.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PACKAGES = ("ujobs_bridge", "celery_compat", "migrate")
README_MAX_LINES = 300


def page(name: str) -> str:
    return (DOCS / name).read_text()


# -- the site builds ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for the session with --strict (mkdocs.yml also sets strict)."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_site_builds_strict_with_every_page_and_the_generated_cli(site: Path) -> None:
    for name in ("index.html", "tutorial/django-celery/index.html", "reference/cli/index.html"):
        assert (site / name).is_file(), name
    cli_page = (site / "reference/cli/index.html").read_text()
    for path in command_paths():  # mkdocs-click rendered a section per command, plugins too
        assert f'id="ujobs-bridge-{path.replace(" ", "-")}"' in cli_page, path
    schema_page = (site / "reference/schema/index.html").read_text()
    assert "x_jobs" in schema_page and "x_celery_results" in schema_page  # snippets included


# -- every command -----------------------------------------------------------------------------


def command_paths() -> list[str]:
    """Every command one can run: the leaves of the click tree, and groups that run by themselves
    (``migrate``), contributed commands included."""
    paths: list[str] = []

    def walk(command: click.Command, ctx: click.Context, path: list[str]) -> None:
        if path and (not isinstance(command, click.Group) or command.invoke_without_command):
            paths.append(" ".join(path))
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, click.Context(sub, parent=ctx, info_name=name), [*path, name])

    walk(cli, click.Context(cli, info_name="ujobs-bridge"), [])
    return paths


def missing_commands(text: str) -> list[str]:
    """The commands without a synopsis line (``ujobs-bridge PATH ...``) in ``text``."""
    lines = [line.strip() for line in text.splitlines()]
    return [
        path
        for path in command_paths()
        if not any(re.match(rf"ujobs-bridge {re.escape(path)}(\s|$)", line) for line in lines)
    ]


def test_every_command_has_a_synopsis_line_in_the_cli_reference() -> None:
    assert len(command_paths()) > 20
    assert missing_commands(page("reference/cli.md")) == []


def test_the_command_check_fails_when_a_command_is_removed() -> None:
    text = page("reference/cli.md")
    removed = "\n".join(
        line for line in text.splitlines() if not line.startswith("ujobs-bridge jobs requeue")
    )
    assert missing_commands(removed) == ["jobs requeue"]


# -- every setting and environment variable ----------------------------------------------------

ENV_READS = (
    "os.environ.get",
    "os.getenv",
    "environ.get",
    "os.environ.setdefault",
    "os.environ.pop",
)


@functools.cache
def package_trees() -> tuple[ast.Module, ...]:
    """Every module of the packages, parsed once for the session."""
    paths = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
    return tuple(ast.parse(path.read_text()) for path in paths)


@functools.cache
def environment_variables() -> frozenset[str]:
    """Every variable the packages read or set: a literal given to ``os.environ``/``getenv``, a
    module constant named ``*ENV*`` holding a variable's name, and any ``UJOBS_*`` literal."""
    found: set[str] = set()
    for tree in package_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"UJOBS_[A-Z0-9_]+", node.value):
                    found.add(node.value)
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ENV_READS:
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.add(first.value)
            elif (
                isinstance(node, ast.Subscript)
                and ast.unparse(node.value) == "os.environ"
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
            ):
                found.add(node.slice.value)
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant):
                value = statement.value.value
                for target in statement.targets:
                    if (
                        isinstance(target, ast.Name)
                        and re.search(r"(^|_)ENV($|_)", target.id)
                        and isinstance(value, str)
                        and re.fullmatch(r"[A-Z][A-Z0-9_]*", value)
                    ):
                        found.add(value)
    return frozenset(found)


@functools.cache
def celery_settings() -> frozenset[str]:
    """Every ``ujobs_*`` key celery_compat reads from an app's conf or a beat entry's options."""
    found: set[str] = set()
    for tree in package_trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("get", "conf_value"):
                found.update(
                    arg.value
                    for arg in node.args
                    if isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and re.fullmatch(r"ujobs_[a-z_]+", arg.value)
                )
    return frozenset(found)


def table_entries(text: str) -> set[str]:
    """The names in backticks in the first cell of each table row of ``text``."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
    return names


def missing_settings(text: str) -> list[str]:
    documented = table_entries(text)
    fields = {field.name for field in dataclasses.fields(WorkerConfig)}
    wanted = environment_variables() | celery_settings() | fields
    return sorted(wanted - documented)


def test_every_setting_and_environment_variable_is_in_the_reference() -> None:
    assert {
        "UJOBS_DATABASE_URL",
        "UJOBS_PGBOUNCER",
        "AUTOSCALE_KEEPALIVE",
    } <= environment_variables()
    assert {"ujobs_database_url", "ujobs_broker_tasks"} <= celery_settings()
    assert missing_settings(page("reference/settings.md")) == []


def test_the_settings_check_fails_when_an_entry_is_removed() -> None:
    text = page("reference/settings.md")
    for name in ("UJOBS_LISTEN_URL", "ujobs_max_deliveries", "prefetch_multiplier"):
        removed = "\n".join(
            line for line in text.splitlines() if not line.startswith(f"| `{name}`")
        )
        assert missing_settings(removed) == [name]


# -- every error code --------------------------------------------------------------------------


def missing_codes(text: str) -> list[str]:
    """The codes without a ``### UJ_...`` section that gives a hint."""
    sections = dict(re.findall(r"^### (UJ_[A-Z_]+)\n(.*?)(?=^#|\Z)", text, re.M | re.S))
    return [code.value for code in ErrorCode if "**Hint:**" not in sections.get(code.value, "")]


def test_every_error_code_is_in_the_reference_with_its_hint() -> None:
    assert len(ErrorCode) > 40
    assert missing_codes(page("reference/errors.md")) == []


def test_the_error_code_check_fails_when_a_code_is_removed() -> None:
    text = page("reference/errors.md")
    start = text.index("### UJ_LEASE_LOST")
    removed = text[:start] + text[text.index("###", start + 3) :]
    assert missing_codes(removed) == ["UJ_LEASE_LOST"]


# -- the README --------------------------------------------------------------------------------


def readme_blocks(language: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def test_the_readme_is_a_short_front_door_whose_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links into the docs"
    broken = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert broken == []


def test_every_snippet_is_run_or_says_why_not() -> None:
    problems = [
        problem for page in doc_snippets.pages() for problem in doc_snippets.unmarked_problems(page)
    ]
    assert problems == []
    every = [b for page in doc_snippets.pages() for b in doc_snippets.blocks(page) if b.snippet]
    run = [b for b in every if b.skip_reason is None]
    assert len(every) >= 40 and len(run) >= 25, (len(every), len(run))
    assert len(doc_snippets.runnable_pages()) >= 10


def test_the_snippet_check_fails_on_a_bare_fence_a_skip_without_reason_or_broken_python() -> None:
    index = DOCS / "index.md"
    text = index.read_text()
    marker = text[
        text.index("<!-- snippet: skip") : text.index("-->", text.index("<!-- snippet: skip")) + 3
    ]
    assert doc_snippets.unmarked_problems(index, text) == []
    bare = text.replace(marker + "\n```bash", "```")
    assert [p.split(": ", 1)[1] for p in doc_snippets.unmarked_problems(index, bare)] == [
        "a fence without a language (text, if not a snippet)"
    ]
    no_reason = text.replace(marker, "<!-- snippet: skip -->")
    assert [p.split(": ", 1)[1] for p in doc_snippets.unmarked_problems(index, no_reason)] == [
        'skip without reason="..."'
    ]
    unmarked = text.replace(marker + "\n", "")
    assert doc_snippets.unmarked_problems(index, unmarked) == []  # then it runs: pip install...
    assert [b.skip_reason for b in doc_snippets.blocks(index, unmarked) if b.snippet] == [None]
    jobs = DOCS / "reference/jobs.md"
    awaited = jobs.read_text().replace(
        "async def charge_later(async_conn: psycopg.AsyncConnection) -> None:\n    await",
        "await",
    )
    assert [
        "'await' outside function" in p for p in doc_snippets.unmarked_problems(jobs, awaited)
    ] == [True]


def test_the_version_is_single_sourced() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{__version__}"' in pyproject
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip().endswith(__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{__version__}]" in changelog


def test_a_shell_block_runs_one_command_a_line_and_bounds_the_ones_that_run_until_stopped() -> None:
    block = "ujobs-bridge db grant --dsn x \\\n    --producer web  # once\n\n# a comment\nls\n"
    assert list(doc_snippets.commands(block)) == [
        "ujobs-bridge db grant --dsn x --producer web  # once",
        "ls",
    ]
    console = "$ ujobs-bridge jobs ls\n6 job(s)\n$ echo done\n"
    assert list(doc_snippets.commands(console, "console")) == ["ujobs-bridge jobs ls", "echo done"]
    bounded = [
        "ujobs-bridge worker -A tasks  # Ctrl-C",
        "ujobs-bridge scheduler -A proj",
        "ujobs-bridge migrate -A proj -Q emails --follow",
        "ujobs-bridge outbox relay --source x",
    ]
    assert all(doc_snippets.long_running(command) for command in bounded)
    ends = ["ujobs-bridge migrate -A proj --all-queues", "ujobs-bridge jobs ls", "python x.py"]
    assert not any(doc_snippets.long_running(command) for command in ends)
