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
from ujobs_bridge.errors import DatabaseUnavailableError
from ujobs_bridge.testing import TemporaryDatabase, admin_dsn_from_env, dsn_for
from ujobs_bridge.testing.cluster import PrivateCluster
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


# x_job_claimable (migration 0019) must hold exactly the claimable jobs, with their queue, name,
# priority and run_at, whatever statements a test ran: checked after every test on the session
# database, so each test that moves jobs in and out of the claim's set checks it.
CLAIM_SET_DRIFT = (
    "select (select count(*) from (select id, queue, name, priority, run_at from x_jobs"
    " where claimable except all select id, queue, name, priority, run_at from x_job_claimable)"
    " as m), (select count(*) from (select id, queue, name, priority, run_at from x_job_claimable"
    " except all select id, queue, name, priority, run_at from x_jobs where claimable) as e)"
)


def assert_claim_set_exact(dsn: str) -> None:
    """No claimable job missing from x_job_claimable, no row there that is not one (or stale)."""
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError:
        return  # the test took the server away; nothing to read
    with conn:
        row = conn.execute(CLAIM_SET_DRIFT).fetchone()
    assert row == (0, 0), f"x_job_claimable drifted: (missing, extra) = {row}"


@pytest.fixture
def dsn(pg_database: TemporaryDatabase) -> Iterator[str]:
    """The session database, emptied for this test."""
    pg_database.reset()
    yield pg_database.dsn
    assert_claim_set_exact(pg_database.dsn)


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


@pytest.fixture(scope="module")
def private_cluster() -> Iterator[PrivateCluster]:
    """A Postgres server of this module's own (``PrivateCluster``: temporary ``initdb`` on a free
    port) that its tests may stop, crash and restart; never the shared server. Skips when no
    server binaries are installed (fails under CI)."""
    try:
        cluster = PrivateCluster()
    except DatabaseUnavailableError as exc:
        if CI:
            raise
        pytest.skip(str(exc))
    with cluster:
        yield cluster


@pytest.fixture(scope="module")
def private_database(private_cluster: PrivateCluster) -> Iterator[TemporaryDatabase]:
    with TemporaryDatabase(private_cluster.admin_dsn, prefix="ujb_outage") as database:
        yield database


@pytest.fixture
def outage_dsn(private_cluster: PrivateCluster, private_database: TemporaryDatabase) -> str:
    """The private cluster's database, up (a test that failed mid-outage left it down) and
    emptied for this test."""
    if not private_cluster.running:
        private_cluster.start()
    private_database.reset()
    return private_database.dsn
