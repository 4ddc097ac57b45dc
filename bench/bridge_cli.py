"""The ujobs-bridge command line as the bench drives it: ``db upgrade``, ``worker``, done rows.

Why it exists: three systems measure the bridge from outside, as an operator runs it
(``ujobs_system``, ``compat_system``, ``migrate_system``). Each makes a fresh database and
installs the schema with ``ujobs-bridge db upgrade``; the first two start ``ujobs-bridge worker``
subprocesses and see a drain end by counting ``done`` rows of their queue. That lives here once,
so the systems cannot drift apart (a worker started with other flags, the schema installed
another way, completions counted differently)::

    ujobs-bridge db upgrade --dsn DSN
    ujobs-bridge worker --dsn DSN -A <tasks module> -Q <queue> -c 8 [extra flags]

What it is not: the cells' clock (``cells``) or process plumbing (``procs``): a worker is spawned
through ``procs.spawn`` like every other process the bench starts.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

from . import pg
from .procs import Group, spawn
from .settings import PROJECT_ROOT

CONCURRENCY = 8  # every bridge worker the bench starts runs ``-c 8``
UPGRADE_TIMEOUT_S = 120


def command() -> list[str]:
    """The ``ujobs-bridge`` executable of this interpreter's environment (or ``python -m``)."""
    script = Path(sys.executable).parent / "ujobs-bridge"
    if script.exists():
        return [str(script)]
    found = shutil.which("ujobs-bridge")
    return [found] if found else [sys.executable, "-m", "ujobs_bridge"]


def version() -> str:
    try:
        return metadata.version("ujobs-bridge")
    except metadata.PackageNotFoundError:
        return "?"


def fresh_database(dbname: str) -> str:
    """Create ``dbname`` and install the schema with the CLI; its ``postgresql://`` URL.

    The database is dropped again if the upgrade fails, so the caller owns it only on success.
    """
    pg.create(dbname)
    url = pg.url_for(dbname)
    try:
        upgrade(url)
    except BaseException:
        pg.drop(dbname)
        raise
    return url


def upgrade(url: str) -> None:
    """``ujobs-bridge db upgrade --dsn URL``; raises with its output when it fails."""
    done = subprocess.run(
        [*command(), "db", "upgrade", "--dsn", url],
        capture_output=True,
        text=True,
        timeout=UPGRADE_TIMEOUT_S,
        cwd=PROJECT_ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ujobs-bridge db upgrade failed:\n{done.stdout}{done.stderr}")


def spawn_worker(
    name: str,
    *,
    dsn: str,
    tasks: str,
    queue: str,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    extra: Sequence[str] = (),
    concurrency: int = CONCURRENCY,
) -> Group:
    """``ujobs-bridge worker -A <tasks> -Q <queue> -c CONCURRENCY`` run from the project root
    (the step-overhead cell also runs other ``-c``)."""
    argv = [
        *command(), "worker", "--dsn", dsn, "-A", tasks, "-Q", queue, "-c", str(concurrency),
        *extra,
    ]  # fmt: skip
    full_env = {"PYTHONPATH": str(PROJECT_ROOT), **(env or {})}
    return spawn(name, argv, log_dir=log_dir, env=full_env, cwd=PROJECT_ROOT)


def done_count(conn: psycopg.Connection[Any], queue: str) -> int:
    """Jobs of ``queue`` in state ``done``: how the bench sees a bridge drain progress."""
    row = conn.execute(
        "select count(*) from x_jobs where queue = %s and state = 'done'", (queue,)
    ).fetchone()
    return int(row[0]) if row else 0
