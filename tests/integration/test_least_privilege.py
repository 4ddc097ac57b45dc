"""Least privilege: the schema owner upgrades and grants; an application role with only those
grants enqueues, works, schedules and drains, and runtime paths never run DDL.

The database is owned by a role of its own and ``public`` gives other roles no CREATE (as
PostgreSQL 15 does by default, made explicit here), so an application role that tried any DDL
would fail. Every command is the real ``ujobs-bridge`` console entry, run as a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from cli_proc import CliProc
from psycopg import sql

from conftest import ADMIN_DSN, TESTS_DIR, _dsn_for, wait_for
from ujobs_bridge import connect
from ujobs_bridge._internal.config.dsn import mask_dsn
from ujobs_bridge._internal.db import connections, schema
from ujobs_bridge.errors import ErrorCode, SchemaError
from ujobs_bridge.testing import redis_url
from ujobs_bridge.testing.database import dsn_as

GUIDE_REDIS = redis_url(11)  # apps.guide_proj's broker


@dataclass(frozen=True)
class Roles:
    owner_dsn: str
    app_dsn: str
    app_role: str


@pytest.fixture
def roles() -> Iterator[Roles]:
    tag = uuid.uuid4().hex[:8]
    name, owner, app = f"ujb_lp_{tag}", f"ujb_lp_owner_{tag}", f"ujb_lp_app_{tag}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(owner)))
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(app)))
        admin.execute(
            sql.SQL("create database {} owner {}").format(
                sql.Identifier(name), sql.Identifier(owner)
            )
        )
    with psycopg.connect(_dsn_for(name), autocommit=True) as conn:
        conn.execute("revoke create on schema public from public")
    try:
        yield Roles(dsn_as(_dsn_for(name), owner), dsn_as(_dsn_for(name), app), app)
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
            )
            for role in (app, owner):
                admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(role)))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), full.get("PYTHONPATH", "")])
    full.pop("UJOBS_DATABASE_URL", None)
    full.pop("UJOBS_AUTO_UPGRADE", None)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full,
        cwd=TESTS_DIR,
    )


def count(dsn: str, query: sql.Composable | str, *params: object) -> int:
    with connections.connect(dsn, connections.Role("test")) as conn:
        row = conn.execute(query if isinstance(query, sql.Composable) else sql.SQL(query), params)
        found = row.fetchone()
    return int(found[0]) if found else 0


def test_runtime_paths_never_run_ddl_and_name_the_fix(roles: Roles) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        psycopg.connect(roles.app_dsn, autocommit=True) as conn,
    ):
        conn.execute("create table x_probe (id int)")

    with pytest.raises(SchemaError) as missing:
        connect(roles.app_dsn)
    assert missing.value.code == ErrorCode.SCHEMA_OUTDATED
    command = f"ujobs-bridge db upgrade --dsn '{mask_dsn(roles.app_dsn)}'"
    assert f"run `{command}` as the schema owner" in missing.value.render()
    worker = cli("worker", "-A", "apps.basic_jobs", "-Q", "basic", "--dsn", roles.app_dsn)
    assert worker.returncode != 0
    assert "as the schema owner" in worker.stdout + worker.stderr
    assert "Traceback" not in worker.stderr and "InsufficientPrivilege" not in worker.stderr

    upgraded = cli("db", "upgrade", "--dsn", roles.owner_dsn)
    assert upgraded.returncode == 0, upgraded.stderr
    with pytest.raises(SchemaError) as not_granted:
        connect(roles.app_dsn)
    assert not_granted.value.code == ErrorCode.SCHEMA_PRIVILEGE
    assert "db grant" in not_granted.value.render()

    unknown = cli("db", "grant", "no_such_role_here", "--dsn", roles.owner_dsn)
    assert unknown.returncode != 0
    assert "UJ_ROLE_NOT_FOUND" in unknown.stdout + unknown.stderr


def test_an_app_role_with_only_the_grants_enqueues_works_schedules_and_drains(
    roles: Roles, tmp_path: Path
) -> None:
    assert cli("db", "upgrade", "--dsn", roles.owner_dsn).returncode == 0
    granted = cli("db", "grant", roles.app_role, "--dsn", roles.owner_dsn)
    assert granted.returncode == 0, granted.stderr
    assert (
        "x_jobs" in schema.grant(roles.owner_dsn, roles.app_role).relations
    )  # idempotent, names them

    # Enqueue (a plain @job) and work it, as the application role.
    from apps import basic_jobs

    with connect(roles.app_dsn) as client:
        basic_jobs.add.configure(client=client).enqueue(2, 3)
    worker = CliProc(
        ["worker", "-A", "apps.basic_jobs", "-Q", "basic", "--dsn", roles.app_dsn],
        tmp_path / "worker.log",
    )
    try:
        wait_for(
            lambda: count(roles.owner_dsn, "select count(*) from x_jobs where state = 'done'") == 1,
            timeout=60,
            what="the job done by the app role",
        )
    finally:
        worker.term()
        assert worker.wait(60) == 0
        worker.close()

    # Schedule: the scheduler elects itself leader and fires, as the application role.
    scheduler = CliProc(
        ["scheduler", "-A", "apps.sched_tasks", "--dsn", roles.app_dsn],
        tmp_path / "scheduler.log",
    )
    try:
        wait_for(
            lambda: (
                count(roles.owner_dsn, "select count(*) from x_jobs where queue = 'sched-tests'")
                > 0
            ),
            timeout=60,
            what="a scheduled fire by the app role",
        )
    finally:
        scheduler.term()
        assert scheduler.wait(60) == 0
        scheduler.close()

    # Drain a Celery message from the app's broker, then run it, as the application role.
    import celery
    import redis

    redis.Redis.from_url(GUIDE_REDIS).delete("guide")
    sender = celery.Celery("lp_sender", broker=GUIDE_REDIS)
    try:
        sender.send_task("apps.guide_proj.tasks.add", (20, 22), queue="guide")
    finally:
        sender.close()
    as_app = {"GUIDE_PROJ_DATABASE_URL": roles.app_dsn, "UJOBS_HOME": str(tmp_path / "home")}
    drained = cli("migrate", "-A", "apps.guide_proj", env=as_app)
    assert drained.returncode == 0, drained.stdout + drained.stderr
    celery_worker = CliProc(
        ["worker", "-A", "apps.guide_proj", "-Q", "guide"],
        tmp_path / "celery-worker.log",
        env=as_app,
    )
    try:
        wait_for(
            lambda: (
                count(
                    roles.owner_dsn,
                    "select count(*) from x_jobs where name = 'apps.guide_proj.tasks.add' "
                    "and state = 'done'",
                )
                == 1
            ),
            timeout=60,
            what="the drained Celery task run by the app role",
        )
    finally:
        celery_worker.term()
        assert celery_worker.wait(60) == 0
        celery_worker.close()


def test_only_a_role_that_may_vacuum_the_claim_table_is_let_to(roles: Roles) -> None:
    # The worker vacuums x_job_claimable itself (worker/claims.py) only where its role may: an
    # application role with the grants alone would get a warning per vacuum and nothing done, so
    # it leaves the table to autovacuum.
    from ujobs_bridge._internal.db import claim_table

    assert cli("db", "upgrade", "--dsn", roles.owner_dsn).returncode == 0
    assert cli("db", "grant", roles.app_role, "--dsn", roles.owner_dsn).returncode == 0
    with connections.connect(roles.owner_dsn, connections.Role("test")) as owner:
        assert claim_table.vacuum_allowed(owner) is True
    with connections.connect(roles.app_dsn, connections.Role("test")) as app:
        assert claim_table.vacuum_allowed(app) is False
