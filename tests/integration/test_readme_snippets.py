"""The README's first quickstart runs as written: its ``tasks.py`` and ``signup.py`` are taken
from the README, ``signup.py`` runs against a real database (``UJOBS_DATABASE_URL``, as a reader
would set it), and a worker for ``tasks`` runs what it enqueued. What the README says ``jobs ls``
then shows must be what the rows hold: six done jobs, none for the user whose transaction rolled
back. (The other Python snippets are checked as valid Python in ``tests/unit/test_docs.py``; the
Celery quickstart's layout is the one ``tests/integration/test_celery_django.py`` runs.)"""

from __future__ import annotations

import re
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from ujobs_bridge import Worker, WorkerConfig
from ujobs_bridge.testing import run_until_idle

ROOT = Path(__file__).resolve().parents[2]


def readme_files() -> dict[str, str]:
    """Each snippet the README introduces with its file name (`` `tasks.py`: ``)."""
    text = (ROOT / "README.md").read_text()
    return dict(re.findall(r"^`([\w/]+\.py)`[^\n]*\n\n```python\n(.*?)^```", text, re.M | re.S))


@pytest.fixture
def quickstart_dir(tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    files = readme_files()
    for name in ("tasks.py", "signup.py"):
        (tmp_path / name).write_text(files[name])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("UJOBS_DATABASE_URL", dsn)
    yield tmp_path
    sys.modules.pop("tasks", None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists users")


def test_the_readme_quickstart_runs_and_shows_what_it_says(quickstart_dir: Path, dsn: str) -> None:
    runpy.run_path(str(quickstart_dir / "signup.py"), run_name="__main__")
    send_welcome = sys.modules["tasks"].send_welcome
    worker = Worker(dsn, {send_welcome.name: send_welcome}, WorkerConfig(queues=("emails",)))
    run_until_idle(worker)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select input -> 'args' ->> 0, state from x_jobs where name = %s order by 1",
            (send_welcome.name,),
        ).fetchall()
        users = conn.execute("select id from users").fetchall()
    assert rows == [(user, "done") for user in sorted(["42", "100", "101", "102", "103", "104"])]
    assert users == [(42,)]  # the signup committed with its job; user 13 rolled back with its own
