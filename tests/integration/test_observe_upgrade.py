"""Migrations 0014 and 0026 on a database that already holds jobs: the dashboard's numbers are
the same before and after the upgrade that moved them onto indexes a settle does not change, and
the last hour's failures with a kind move out of the dead letters' count.

The promise: an operator who upgrades sees every live, suspended, running and dead job counted
as before, and the last hour's chart keeps the jobs that finished before the upgrade.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from conftest import ADMIN_DSN
from ujobs_bridge._internal.db import observe, schema
from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.testing import dsn_for

BEFORE = 13  # the last migration before 0014


@pytest.fixture
def old_dsn() -> Iterator[str]:
    """A fresh database at schema version 0013."""
    yield from _database_at(BEFORE)


@pytest.fixture
def dsn_0025() -> Iterator[str]:
    """A fresh database at schema version 0025 (the last before failure kinds were counted)."""
    yield from _database_at(25)


def _database_at(before: int) -> Iterator[str]:
    name = f"ujb_test_upgrade_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = dsn_for(ADMIN_DSN, name)
    try:
        with psycopg.connect(dsn) as conn:
            conn.execute(q("schema_version_table"))
            conn.execute(q("schema_version_parts"))
            for migration in schema.available([schema.ENGINE]):
                if migration.version <= before:
                    conn.execute(migration.sql)
                    conn.execute(
                        q("schema_version_record"),
                        {
                            "part": migration.part,
                            "version": migration.version,
                            "name": migration.name,
                        },
                    )
        yield dsn
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
            )


def _add(conn: psycopg.Connection[Any], state: str, run_at: datetime, **extra: Any) -> uuid.UUID:
    job_id = uuid.uuid4()
    conn.execute(
        "insert into x_jobs (id, name, queue, input, state, max_attempts, run_at, finished_at,"
        " lease_token, lease_expires_at) values (%s, 'up.job', 'up', '{}', %s, 3, %s, %s, %s, %s)",
        (job_id, state, run_at, extra.get("finished_at"), extra.get("token"),
         extra.get("expires")),
    )  # fmt: skip
    if extra.get("token"):
        conn.execute(
            "insert into x_job_leases (job_id, token) values (%s, %s)", (job_id, extra["token"])
        )
    return job_id


def test_an_upgrade_keeps_every_count_and_the_last_hour(old_dsn: str) -> None:
    now = datetime.now(UTC)
    with psycopg.connect(old_dsn, autocommit=True) as conn:
        _add(conn, "ready", now - timedelta(minutes=5))
        _add(conn, "ready", now + timedelta(hours=1))
        _add(conn, "running", now - timedelta(minutes=1), token=uuid.uuid4(),
             expires=now + timedelta(minutes=5))  # fmt: skip
        _add(conn, "sleeping", now + timedelta(minutes=10))
        _add(conn, "waiting", datetime(9999, 12, 31, tzinfo=UTC))
        for _ in range(3):
            _add(conn, "done", now - timedelta(hours=1), finished_at=now - timedelta(minutes=2))
        _add(conn, "dead", now - timedelta(hours=1), finished_at=now - timedelta(minutes=2))
        _add(conn, "done", now - timedelta(days=2), finished_at=now - timedelta(days=2))
    assert schema.upgrade(old_dsn)[0].version == BEFORE + 1  # then 0015 and any later ones
    with psycopg.connect(old_dsn, autocommit=True) as conn:
        depth = {d.state: d.jobs for d in observe.observe_depth(conn, None)}
        assert depth == {
            "ready": 1, "scheduled": 1, "running": 1, "sleeping": 1, "waiting": 1, "dead": 1
        }  # fmt: skip
        chart = {m.state: m.jobs for m in observe.observe_finished_per_minute(conn, 60, None)}
        assert chart == {"done": 3, "dead": 1}
        indexes = {
            r[0]
            for r in conn.execute(
                "select indexrelid::regclass::text from pg_index"
                " where indrelid = 'x_jobs'::regclass"
            ).fetchall()
        }
        assert not indexes & {"x_jobs_open_idx", "x_jobs_finished_idx"}


def test_an_upgrade_moves_the_last_hours_failures_out_of_the_dead_letters(dsn_0025: str) -> None:
    """Before 0026 a settle counted a FAILURE as dead; after it, the chart shows the last hour's
    FAILUREs under their kind and the dead letters without them."""
    now = datetime.now(UTC)
    minute = now.replace(second=0, microsecond=0) - timedelta(minutes=2)
    with psycopg.connect(dsn_0025, autocommit=True) as conn:
        for kind in ("FAILURE", "FAILURE", None):
            conn.execute(
                "insert into x_jobs (id, name, queue, input, state, max_attempts, run_at,"
                " finished_at, updated_at, failure_kind) values"
                " (%s, 'up.job', 'up', '{}', 'dead', 3, %s, %s, %s, %s)",
                (uuid.uuid4(), now, minute, minute, kind),
            )
        conn.execute(  # as the settles of two backends counted them before 0026
            "insert into x_job_counts (minute, queue, backend, done, dead)"
            " values (%s, 'up', 7, 4, 2), (%s, 'up', 8, 0, 1)",
            (minute, minute),
        )
    assert schema.upgrade(dsn_0025)[0].version == 26
    with psycopg.connect(dsn_0025, autocommit=True) as conn:
        chart = {m.state: m.jobs for m in observe.observe_finished_per_minute(conn, 60, None)}
    assert chart == {"done": 4, "dead": 1, "FAILURE": 2}
