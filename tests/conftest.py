"""Test wiring: lanes, a private Postgres database per test session (per xdist worker), emptied
before each test, and the test kit's own Redis and RabbitMQ vhost.

Why it exists: tests run against real PostgreSQL (no mocks of the database). The session's
database is the test kit's ``TemporaryDatabase`` (``ujobs_bridge.testing``: named with the pid and
a random suffix, schema installed by the real migration runner, emptied before each test, dropped
at the end), so the project tests its own kit on every run. A missing server skips locally with
the reason, and fails under ``CI=true``.

Lanes are folders and markers: ``tests/unit`` (no services at all), ``tests/integration`` (the
live server and brokers) and ``tests/slow`` (soak, real kills, long timeouts, the fresh venv).
Every test gets its folder's marker here (``-m unit`` is ``tests/unit``); a test marked ``slow``
where it sits beside integration siblings counts as slow, not integration. The helpers
(``apps/``, ``*_support.py``, ``worker_proc.py``...) stay in ``tests/``, on ``sys.path``.

Brokers come from the test kit (``ujobs_bridge.testing.brokers``): ``redis_url(db)`` is a
database of a ``redis-server`` this process started (or ``UJOBS_TEST_REDIS_URL``), ``amqp_url()``
a vhost it created (or ``UJOBS_TEST_AMQP_URL``); both are made on first use and removed when the
session ends. Under xdist each worker is a process, so each has its own database, Redis server
and vhost. Given URLs are shared by every worker: then every test module that talks to a broker
runs in one xdist group (one worker), so no two tests flush the same database at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from ujobs_bridge import FrozenClock, connect
from ujobs_bridge._internal.db import connections
from ujobs_bridge.client import Client
from ujobs_bridge.errors import DatabaseUnavailableError
from ujobs_bridge.testing import (
    AMQP_URL_ENV,
    BROKERS,
    REDIS_URL_ENV,
    TemporaryDatabase,
    admin_dsn_from_env,
    dsn_for,
)
from ujobs_bridge.testing.cluster import PrivateCluster
from ujobs_bridge.testing.pytest import database_or_skip, in_ci

ADMIN_DSN = admin_dsn_from_env()
CI = in_ci()
TESTS_DIR = Path(__file__).parent

sys.path.insert(0, str(TESTS_DIR))  # job modules for worker subprocesses live in tests/apps

LANES = ("unit", "integration", "slow")
# Under given broker URLs (shared by every xdist worker), modules whose source names one of these
# run in one xdist group.
BROKER_WORDS = ("redis", "amqp", "kombu", "celery", "broker", "_support")
SHARED_BROKERS_GROUP = "shared-brokers"
# xdist (``--dist loadgroup``) hands out single tests; these run as one group, on one worker:
# modules whose module-scoped fixture is costly to make twice (a private cluster, a PgBouncer, a
# Django project...), and the heavy single tests that should not share a worker with each other.
MODULE_GROUPS = frozenset(
    {
        "test_outages",
        "test_migrate_outages",
        "test_pgbouncer",
        "test_celery_django",
        "test_outbox",
        "test_migrate_run",
    }
)
# Handed out first (the longest units of work, then the slow lane, then integration, the unit
# lane last): short tests fill the workers' ends, no long test starts when the others are done.
FIRST = ("soak", "fresh-venv", "lint-types")
ORDER = {"slow": 0, "integration": 1, "unit": 2}


def _lane(item: pytest.Item) -> str | None:
    try:
        relative = Path(str(item.path)).resolve().relative_to(TESTS_DIR.resolve())
    except ValueError:
        return None
    return relative.parts[0] if relative.parts and relative.parts[0] in LANES else None


_SOURCES: dict[Path, str] = {}


def _talks_to_a_broker(item: pytest.Item) -> bool:
    path = Path(str(item.path))
    if path not in _SOURCES:
        _SOURCES[path] = path.read_text(errors="replace").lower() if path.exists() else ""
    return any(word in _SOURCES[path] for word in BROKER_WORDS)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shared = bool(os.environ.get(REDIS_URL_ENV) or os.environ.get(AMQP_URL_ENV))
    for item in items:
        lane = _lane(item)
        stem = Path(str(item.path)).stem
        if stem in MODULE_GROUPS and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(stem))
        if lane == "slow" or item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.slow)
        elif lane is not None:
            item.add_marker(getattr(pytest.mark, lane))
        if shared and lane != "unit" and _talks_to_a_broker(item):
            # the only group (xdist joins every group name of a test into one): the decision is
            # per module, so the module's own group marks go too
            for node in item.listchain():
                node.own_markers[:] = [m for m in node.own_markers if m.name != "xdist_group"]
            item.add_marker(pytest.mark.xdist_group(SHARED_BROKERS_GROUP))

    def first(item: pytest.Item) -> tuple[int, int]:
        mark = item.get_closest_marker("xdist_group")
        name = mark.args[0] if mark is not None and mark.args else None
        if name in FIRST:
            return (0, FIRST.index(name))
        return (1, ORDER.get(_lane(item) or "integration", 1))

    items.sort(key=first)  # stable: the collection order otherwise, the same on every worker


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop this process's private Redis and delete its vhost (what it made, nothing else)."""
    BROKERS.close()


def _dsn_for(dbname: str) -> str:
    return dsn_for(ADMIN_DSN, dbname)


@pytest.fixture(autouse=True)
def _no_pooler_carried_over() -> Iterator[None]:
    """A test that met a PgBouncer undeclared turns prepared statements off for its process;
    the next test on this xdist worker starts as a fresh process would."""
    yield
    connections.forget_pooler()


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
def ledger(
    db: psycopg.Connection[tuple[object, ...]],
) -> psycopg.Connection[tuple[object, ...]]:
    """The effect ledger and the gates of ``apps.fault_jobs`` (the fault tests' bodies record
    each phase there and wait on its gates), empty. Tests of one session database share the
    tables, hence ``if not exists`` and the added columns."""
    db.execute(
        "create table if not exists test_effects (key text, job_id uuid, attempt int, pid int,"
        " phase text, at timestamptz default clock_timestamp(), detail text)"
    )
    db.execute(
        "alter table test_effects add column if not exists at timestamptz"
        " default clock_timestamp(), add column if not exists detail text"
    )
    db.execute("create table if not exists test_gates (name text primary key)")
    db.execute("truncate test_effects, test_gates")
    return db


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


def start_recorded(db: psycopg.Connection[tuple[object, ...]], job_id: object) -> bool:
    """Is the start of the job's body recorded on its lease (``started_at``)? A first delivery's
    start is written with the next outcome write, a few milliseconds after the body starts: a
    test that kills a worker to have an attempt charged waits for it."""
    found = db.execute(
        "select started_at is not null from x_job_leases where job_id = %s", (job_id,)
    ).fetchone()
    return bool(found and found[0])
