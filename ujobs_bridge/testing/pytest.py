"""pytest fixtures for code that uses ujobs-bridge: a private database, a client, a frozen clock.

Why it exists: every project testing ``@job`` code needs the same wiring: one database for the
session with the real schema, emptied before each test, a ``Client`` on it and a ``FrozenClock``.
Load it with ``pytest -p ujobs_bridge.testing.pytest`` or ``pytest_plugins =
["ujobs_bridge.testing.pytest"]`` in the root ``conftest.py``. Fixtures:

- ``ujobs_database`` (session): the ``TemporaryDatabase``; override it to use your own.
- ``ujobs_dsn``: its DSN, every ujobs table emptied for this test.
- ``ujobs_clock``: a ``FrozenClock`` (2026-01-01 UTC) the test moves with ``advance``.
- ``ujobs_client``: a ``Client`` on ``ujobs_dsn`` reading time from ``ujobs_clock``.

The server comes from ``UJOBS_TEST_ADMIN_DSN`` (default local ``postgres``). When it is not
reachable the tests using these fixtures are skipped with the reason, except under ``CI=true``,
where they fail: a CI run must not pass by skipping.

What it is not: auto-loaded. It is deliberately not a ``pytest11`` entry point, so installing
ujobs-bridge never adds fixtures to an unrelated test run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from ujobs_bridge._internal.clock import FrozenClock
from ujobs_bridge.client import Client, connect
from ujobs_bridge.errors import DatabaseUnavailableError
from ujobs_bridge.testing.database import TemporaryDatabase


def in_ci() -> bool:
    """``CI`` set to true: a missing database fails instead of skipping."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@contextlib.contextmanager
def database_or_skip(prefix: str = "ujobs_test") -> Iterator[TemporaryDatabase]:
    """A created ``TemporaryDatabase``, dropped on exit; skips the test when the server is not
    reachable (fails under CI)."""
    database = TemporaryDatabase(prefix=prefix)
    try:
        database.create()
    except DatabaseUnavailableError as exc:
        if in_ci():
            raise
        pytest.skip(str(exc))
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture(scope="session")
def ujobs_database() -> Iterator[TemporaryDatabase]:
    """The session's private database, with the schema installed; dropped at the end."""
    with database_or_skip() as database:
        yield database


@pytest.fixture
def ujobs_dsn(ujobs_database: TemporaryDatabase) -> str:
    """The session database, every ujobs table emptied for this test."""
    ujobs_database.reset()
    return ujobs_database.dsn


@pytest.fixture
def ujobs_clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def ujobs_client(ujobs_dsn: str, ujobs_clock: FrozenClock) -> Iterator[Client]:
    client = connect(ujobs_dsn, upgrade=False, clock=ujobs_clock)
    try:
        yield client
    finally:
        client.close()
