"""Every snippet of the README and the docs runs as written (``doc_snippets``: the convention, the
markers that say why a block cannot run, how long-running commands are bounded). One test per
page with a block to run, so xdist spreads the pages (those that run commands in the slow
lane); a page's blocks run in order in one
temporary directory, against this test's database (``UJOBS_DATABASE_URL``, and the names the
pages give it: ``DATABASE_URL``, ``APP_DATABASE_URL``, ``JOBS_DATABASE_URL``, ``OWNER_DSN``), and
a Redis database of the test kit's own server as ``CELERY_BROKER_URL``.

The runner is shown to fail: a page whose ``tasks.py`` lost the name ``signup.py`` imports, and
one whose command prints something else than the block expects, each fail naming the page and
the line."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from doc_snippets import ROOT, PageRun, SnippetFailed, runnable_pages, runs_commands

from ujobs_bridge.testing import redis_url

DATABASE_VARIABLES = (
    "UJOBS_DATABASE_URL",
    "DATABASE_URL",
    "APP_DATABASE_URL",
    "JOBS_DATABASE_URL",
    "OWNER_DSN",
)
BROKER_DB = (
    1  # of the test kit's own redis-server: this file's only (13 is the django-results tests')
)
USER_TABLES = "select tablename from pg_tables where schemaname = 'public' and tablename !~ '^x_'"


@pytest.fixture
def page_run(dsn: str, tmp_path: Path) -> Iterator[PageRun]:
    """A directory and an environment for one page; the tables its snippets made are dropped."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = {row[0] for row in conn.execute(USER_TABLES)}
    broker = redis_url(BROKER_DB)
    with redis.Redis.from_url(broker) as client:
        client.flushdb()
    bin_dir = str(Path(sys.executable).parent)
    env = {
        # the reader's environment, but none of the variables that would point elsewhere (the
        # test kit's own, UJOBS_TEST_*, stay: testing.md runs pytest with the kit's plugin) and
        # nothing of this pytest run (an xdist worker's PYTEST_XDIST_WORKER...)
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("UJOBS_", "PYTEST_")) or k.startswith("UJOBS_TEST_")
        },
        **dict.fromkeys(DATABASE_VARIABLES, dsn),
        "CELERY_BROKER_URL": broker,  # a Celery app of a page sends here, never to a default
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("PYTHONPATH", None)
    # a page's project names its own settings (``os.environ.setdefault`` in its celery.py, as
    # Celery's Django guide does); a value another test of this process set must not win
    env.pop("DJANGO_SETTINGS_MODULE", None)
    work = tmp_path / "page"
    work.mkdir()
    yield PageRun(work, env, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for (table,) in conn.execute(USER_TABLES).fetchall():
            if table not in before:
                conn.execute(psycopg.sql.SQL("drop table {}").format(psycopg.sql.Identifier(table)))


def page_params() -> list[object]:
    """A page that runs commands (each a process start with the package's imports; a worker
    waited for until it is ready and idle) is in the slow lane; a page of Python blocks alone
    stays in this one."""
    return [
        pytest.param(
            page,
            id=str(page.relative_to(ROOT)),
            marks=[pytest.mark.slow, pytest.mark.timeout(600)] if runs_commands(page) else [],
        )
        for page in runnable_pages()
    ]


@pytest.mark.parametrize("page", page_params())
def test_the_snippets_of_the_page_run(page: Path, page_run: PageRun) -> None:
    page_run.run_page(page)


README = ROOT / "README.md"


def test_a_page_whose_module_lost_a_name_fails_at_the_line_that_uses_it(
    page_run: PageRun,
) -> None:
    text = README.read_text().replace("def send_welcome(", "def send_welcome_mail(", 1)
    with pytest.raises(SnippetFailed) as failed:
        page_run.run_page(README, text)
    where, _, message = str(failed.value).partition(": ")
    runs_signup = 1 + text[: text.index("```bash\npython signup.py")].count("\n")
    assert where == f"README.md:{runs_signup}"
    assert message.startswith("'python signup.py' exited 1")
    assert "ImportError: cannot import name 'send_welcome' from 'tasks'" in message


@pytest.mark.slow  # runs the README's first quickstart: a signup, a worker, jobs ls
def test_a_block_whose_output_is_not_what_it_expects_fails(page_run: PageRun) -> None:
    text = README.read_text().replace('expect="6 job(s)"', 'expect="7 job(s)"', 1)
    assert text != README.read_text()
    with pytest.raises(SnippetFailed, match=r"README.md:\d+: expected '7 job\(s\)'"):
        page_run.run_page(README, text)
