"""Test wiring: a private Postgres database per test session, emptied before each test.

Why it exists: tests run against real PostgreSQL (no mocks of the database). The session's
database is the test kit's ``TemporaryDatabase`` (``ujobs_bridge.testing``: named with the pid and
a random suffix, schema installed by the real migration runner, emptied before each test, dropped
at the end), so the project tests its own kit on every run. A missing server skips locally with
the reason, and fails under ``CI=true``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from ujobs_bridge import FrozenClock, connect
from ujobs_bridge.client import Client
from ujobs_bridge.testing import TemporaryDatabase, admin_dsn_from_env, dsn_for
from ujobs_bridge.testing.pytest import database_or_skip, in_ci

ADMIN_DSN = admin_dsn_from_env()
CI = in_ci()
TESTS_DIR = Path(__file__).parent

sys.path.insert(0, str(TESTS_DIR))  # job modules for worker subprocesses live in tests/apps


def _dsn_for(dbname: str) -> str:
    return dsn_for(ADMIN_DSN, dbname)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[TemporaryDatabase]:
    with database_or_skip(prefix="ujb_test") as database:
        yield database


@pytest.fixture(scope="session")
def pg_dsn(pg_database: TemporaryDatabase) -> str:
    return pg_database.dsn


@pytest.fixture
def dsn(pg_database: TemporaryDatabase) -> str:
    """The session database, emptied for this test."""
    pg_database.reset()
    return pg_database.dsn


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def client(dsn: str) -> Iterator[Client]:
    c = connect(dsn, upgrade=False)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def frozen_client(dsn: str, clock: FrozenClock) -> Iterator[Client]:
    c = connect(dsn, upgrade=False, clock=clock)
    try:
        yield c
    finally:
        c.close()


def wait_for(
    condition: Callable[[], object], *, timeout: float = 20.0, what: str = "condition"
) -> object:
    """Poll ``condition`` until it is truthy or the deadline passes (never a bare sleep)."""
    import threading
    import time

    pause = threading.Event()
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        pause.wait(0.02)
