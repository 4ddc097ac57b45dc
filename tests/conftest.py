"""Test wiring: a private Postgres database per test session, emptied before each test.

Why it exists: tests run against real PostgreSQL (no mocks of the database). Each session
creates its own database (named with the pid and a random suffix, so parallel runs never
collide), installs the schema with the real migration runner, and drops it at the end. A missing
server skips locally with the reason, and fails under ``CI=true``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from ujobs_bridge import FrozenClock, connect
from ujobs_bridge.client import Client
from ujobs_bridge.db import schema

ADMIN_DSN = os.environ.get("UJOBS_TEST_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TESTS_DIR = Path(__file__).parent

sys.path.insert(0, str(TESTS_DIR))  # job modules for worker subprocesses live in tests/apps


def _dsn_for(dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items()})


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    try:
        admin = psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if CI:
            raise
        pytest.skip(f"PostgreSQL is not reachable at {ADMIN_DSN}: {exc}")
    name = f"ujb_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with admin:
        admin.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(name)))
    dsn = _dsn_for(name)
    schema.upgrade(dsn)
    try:
        yield dsn
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin2:
            admin2.execute(
                psycopg.sql.SQL("drop database if exists {} with (force)").format(psycopg.sql.Identifier(name))
            )


@pytest.fixture
def dsn(pg_dsn: str) -> str:
    """The session database, emptied for this test."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("truncate x_jobs, x_job_steps, x_job_events, x_migrate_quarantine")
        conn.execute(  # celery_compat's tables (ledger, results, chord counters, revokes)
            "truncate x_celery_tasks, x_celery_results, x_celery_counters, x_celery_chord_parts, x_celery_revoked, x_rate_limits"
        )
    return pg_dsn


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


def wait_for(condition: Callable[[], object], *, timeout: float = 20.0, what: str = "condition") -> object:
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
