"""The schema runner and the operator CLI, as an operator drives them from a shell."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from typing import Any

import psycopg
import pytest

from apps import basic_jobs
from conftest import ADMIN_DSN, _dsn_for
from ujobs_bridge._internal.config.dsn import mask_dsn
from ujobs_bridge._internal.db import schema
from ujobs_bridge.client import Client


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.fixture
def fresh_db() -> Any:
    name = f"ujb_schema_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(name)))
    yield _dsn_for(name)
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(
            psycopg.sql.SQL("drop database {} with (force)").format(psycopg.sql.Identifier(name))
        )


def test_upgrades_racing_from_many_processes_apply_each_migration_once(fresh_db: str) -> None:
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(schema.upgrade(fresh_db))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 0, 0, len(schema.available())]
    assert schema.check(fresh_db) == []


def test_db_upgrade_and_status_through_the_cli(fresh_db: str) -> None:
    before = cli("db", "status", "--dsn", fresh_db, "--json")
    assert before.returncode == 0 and json.loads(before.stdout)["pending"][0]["version"] == 1
    up = cli("db", "upgrade", "--dsn", fresh_db)
    assert up.returncode == 0 and "applied 0001_initial" in up.stdout
    again = cli("db", "upgrade", "--dsn", fresh_db)
    assert "up to date" in again.stdout
    after = json.loads(cli("db", "status", "--dsn", fresh_db, "--json").stdout)
    assert after["pending"] == [] and after["applied"][0]["name"] == "initial"


def test_a_database_newer_than_the_package_is_refused(fresh_db: str) -> None:
    schema.upgrade(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("insert into x_schema_version (version, name) values (999, 'future')")
    result = cli("db", "upgrade", "--dsn", fresh_db)
    assert (
        result.returncode == 1 and "UJ_SCHEMA_NEWER" in result.stderr and "hint:" in result.stderr
    )


def test_jobs_commands_list_show_cancel_requeue_dead_and_stats(
    dsn: str, client: Client, db: Any
) -> None:
    keep = basic_jobs.add.configure(client=client).enqueue(1, 2)
    gone = basic_jobs.add.configure(client=client).enqueue(3, 4)
    listed = json.loads(cli("jobs", "ls", "--dsn", dsn, "--json", "--state", "ready").stdout)
    assert {j["id"] for j in listed} == {str(keep.id), str(gone.id)}
    shown = json.loads(cli("jobs", "show", str(keep.id), "--dsn", dsn, "--json").stdout)
    assert shown["input"] == {"args": [1, 2], "kwargs": {}} and shown["state"] == "ready"
    assert cli("jobs", "cancel", str(gone.id), "--dsn", dsn).returncode == 0
    again = cli("jobs", "cancel", str(gone.id), "--dsn", dsn)
    assert again.returncode == 1 and "already cancelled" in again.stderr
    requeued = json.loads(cli("jobs", "requeue", str(gone.id), "--dsn", dsn, "--json").stdout)
    assert requeued["state"] == "ready" and requeued["attempt"] == 0
    db.execute("update x_jobs set state = 'dead', last_error = 'boom' where id = %s", (gone.id,))
    dead = json.loads(cli("jobs", "dead", "--dsn", dsn, "--json").stdout)
    assert [d["id"] for d in dead] == [str(gone.id)]
    stats = json.loads(cli("jobs", "stats", "--dsn", dsn, "--json").stdout)
    assert {(s["queue"], s["state"], s["jobs"]) for s in stats} == {
        ("basic", "ready", 1),
        ("basic", "dead", 1),
    }
    table = cli("jobs", "ls", "--dsn", dsn)
    assert table.returncode == 0 and "2 job(s)" in table.stdout


def test_show_redacts_secret_looking_keys_unless_asked(dsn: str, client: Client) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue({"password": "hunter2", "user": "ann"}, 1)
    shown = cli("jobs", "show", str(ref.id), "--dsn", dsn, "--json").stdout
    assert "hunter2" not in shown and "ann" in shown
    assert (
        "hunter2" in cli("jobs", "show", str(ref.id), "--dsn", dsn, "--json", "--show-input").stdout
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["worker", "-A", "apps.basic_jobs", "-c", "-2"], "concurrency"),
        (["worker", "-A", "apps.basic_jobs", "-c", "0"], "concurrency"),
        (["worker", "-A", "apps.basic_jobs", "-Q", "emails,bad'queue"], "queue name"),
        (["worker", "-A", "apps.basic_jobs", "-Q", "a,,b"], "empty name"),
        (["worker", "-A", "apps.basic_jobs", "--poll", "nan"], "poll interval"),
        (["worker", "-A", "apps.basic_jobs", "--lease", "inf"], "lease"),
        (["worker", "-A", "apps.basic_jobs", "--pool", "gevent"], "pool"),
        (["jobs", "ls", "--state", "sleepy"], "not a job state"),
    ],
)
def test_bad_configuration_is_refused_with_a_hint(dsn: str, args: list[str], needle: str) -> None:
    result = cli(*args, "--dsn", dsn)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and "hint:" in result.stderr


def test_an_unknown_app_module_names_the_fix(dsn: str) -> None:
    result = cli("worker", "-A", "no_such_module_here", "--dsn", dsn)
    assert (
        result.returncode == 1
        and "UJ_APP_NOT_FOUND" in result.stderr
        and "PYTHONPATH" in result.stderr
    )


def test_passwords_never_appear_in_printed_dsns(dsn: str) -> None:
    secret = "s3cr3t-canary"
    assert secret not in mask_dsn(f"postgresql://app:{secret}@db.example:5432/jobs")
    assert secret not in mask_dsn(f"host=db user=app password={secret} dbname=jobs")
    assert secret not in mask_dsn(f"postgresql://app@db/jobs?password={secret}&sslmode=require")
    assert mask_dsn("postgresql://app:pw@db:5432/jobs") == "postgresql://app:****@db:5432/jobs"
    bad = f"postgresql://nobody:{secret}@127.0.0.1:1/none"
    for args in (["db", "status", "--dsn", bad], ["jobs", "ls", "--dsn", bad]):
        result = cli(*args)
        assert result.returncode != 0
        assert secret not in result.stdout + result.stderr


def run_cli(*args: str) -> Any:
    """The command line in this process (``ujobs-bridge ...``), its output and exit code."""
    from click.testing import CliRunner

    from ujobs_bridge._internal.cli import cli as command_line

    return CliRunner().invoke(command_line, list(args))


def test_db_commands_take_the_apps_database_and_hints_name_the_exact_command(
    fresh_db: str, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-A`` on every ``db`` command: the app's ``ujobs_database_url`` wins over
    ``$UJOBS_DATABASE_URL`` as for ``worker``, and each schema hint prints the command that
    upgrades the database that failed, so following it fixes that database."""
    from apps import celery_cli_worker

    spec = "apps.celery_cli_worker"
    monkeypatch.setattr(celery_cli_worker.app.conf, "ujobs_database_url", fresh_db)
    monkeypatch.setenv("UJOBS_DATABASE_URL", dsn)  # another database, already upgraded

    status = run_cli("db", "status", "-A", spec)
    assert status.exit_code == 0, status.output
    assert f"database: {mask_dsn(fresh_db)} (the -A app's ujobs_database_url)" in status.output
    assert f"pending: run `ujobs-bridge db upgrade -A {spec}`" in status.output
    listed = run_cli("jobs", "ls", "-A", spec)
    assert listed.exit_code == 1
    assert f"hint: run `ujobs-bridge db upgrade -A {spec}`" in listed.output
    health = run_cli("health", "-A", spec, "--json")
    assert f"run `ujobs-bridge db upgrade -A {spec}`" in health.output
    by_dsn = run_cli("jobs", "ls", "--dsn", fresh_db)
    assert f"hint: run `ujobs-bridge db upgrade --dsn '{mask_dsn(fresh_db)}'`" in by_dsn.output

    up = run_cli("db", "upgrade", "-A", spec)  # the command the hints print
    assert up.exit_code == 0, up.output
    assert "applied 0001_" in up.output
    assert schema.check(fresh_db) == []
    assert run_cli("jobs", "ls", "-A", spec).exit_code == 0
    assert "schema is up to date" in run_cli("db", "upgrade", "-A", spec).output
