"""``-A`` resolves as ``celery -A`` does (Celery's ``find_app``) for every command that takes it,
and each such command uses the app's own database (``ujobs_database_url``) unless ``--dsn`` says
otherwise. The app is Celery's documented layout (``apps/guide_proj``: ``celery.py`` holds the
app, ``__init__`` imports it as ``celery_app``, tasks in ``tasks.py``), its database named only
by its config (``GUIDE_PROJ_DATABASE_URL``; no ``--dsn``, no ``UJOBS_DATABASE_URL``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from cli_proc import TESTS_DIR, CliProc

from apps.celery_harness import bound
from conftest import wait_for
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.config.dsn import mask_dsn
from ujobs_bridge._internal.db import connections
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.testing import redis_url

pytestmark = [pytest.mark.timeout(90)]

APP = "apps.guide_proj"


def run(*args: str, app_dsn: str | None, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``ujobs-bridge ARGS`` from the tests directory with the app's URL in its environment and
    no other database configured (an embedded Postgres would live under ``tmp_path``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    env.pop("UJOBS_DATABASE_URL", None)
    env["UJOBS_HOME"] = str(tmp_path / "home")
    if app_dsn is not None:
        env["GUIDE_PROJ_DATABASE_URL"] = app_dsn
    else:
        env.pop("GUIDE_PROJ_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=TESTS_DIR,
    )


def uses_app_database(result: subprocess.CompletedProcess[str], dsn: str) -> None:
    """The command succeeded on the app's database (with ``--json`` the note is not printed: the
    rows it read, and no embedded Postgres started, show it)."""
    assert result.returncode == 0, result.stdout + result.stderr
    if "--json" not in result.args:
        assert f"database: {mask_dsn(dsn)} (the -A app's ujobs_database_url)" in result.stderr
    assert "embedded" not in result.stderr


@pytest.fixture
def procs() -> Iterator[list[CliProc]]:
    started: list[CliProc] = []
    yield started
    for proc in started:
        proc.close()


def test_the_guide_layout_resolves_for_every_spelling_celery_accepts() -> None:
    from apps.guide_proj.celery import app

    for spec in (
        APP,
        f"{APP}.celery",
        f"{APP}.celery:app",
        f"{APP}.celery.app",
        f"{APP}:celery_app",
    ):
        loaded = loading.resolve(spec)
        assert getattr(loaded, "app", None) is app, spec
        assert "apps.guide_proj.tasks.add" in {j.name for j in loaded.jobs()}, spec
    # a package whose __init__ does not import its app: found in its `celery` submodule
    from apps.guide_bare.celery import bare_app

    assert getattr(loading.resolve("apps.guide_bare"), "app", None) is bare_app


def test_worker_dash_a_proj_runs_the_projects_tasks_on_the_apps_database(
    dsn: str, tmp_path: Path, procs: list[CliProc], monkeypatch: pytest.MonkeyPatch
) -> None:
    from apps.guide_proj.tasks import add

    monkeypatch.setenv("GUIDE_PROJ_DATABASE_URL", dsn)
    monkeypatch.setenv("UJOBS_HOME", str(tmp_path / "home"))
    proc = CliProc(["worker", "-A", APP, "--poll", "0.2"], tmp_path / "worker.log")
    procs.append(proc)
    wait_for(lambda: " ready: " in proc.output(), timeout=30, what="the worker to be ready")
    assert f"database: {mask_dsn(dsn)} (the -A app's ujobs_database_url)" in proc.output()
    assert "queues=guide" in proc.output()
    with bound(add.app, dsn):
        assert add.delay(2, 3).get(timeout=30) == 5, proc.output()
    proc.term()
    assert proc.wait(timeout=30) == 0, proc.output()


def test_scheduler_dash_a_proj_fires_the_beat_schedule_on_the_apps_database(
    dsn: str, tmp_path: Path, procs: list[CliProc], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GUIDE_PROJ_DATABASE_URL", dsn)
    monkeypatch.setenv("UJOBS_HOME", str(tmp_path / "home"))
    proc = CliProc(["scheduler", "-A", APP, "--no-purge", "--no-outbox"], tmp_path / "sched.log")
    procs.append(proc)
    wait_for(lambda: " ready: " in proc.output(), timeout=30, what="the scheduler to be ready")
    assert f"database: {mask_dsn(dsn)} (the -A app's ujobs_database_url)" in proc.output()
    assert "ready: 1 task(s)" in proc.output()
    proc.term()
    assert proc.wait(timeout=30) == 0, proc.output()


def test_tasks_ls_reads_the_apps_database_and_shows_its_beat_entries(
    dsn: str, tmp_path: Path
) -> None:
    result = run("tasks", "ls", "-A", APP, "--no-purge", app_dsn=dsn, tmp_path=tmp_path)
    uses_app_database(result, dsn)
    assert "1 task(s)" in result.stdout
    as_json = run("tasks", "ls", "-A", f"{APP}.celery", "--json", app_dsn=dsn, tmp_path=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    names = {row["name"] for row in json.loads(as_json.stdout)}
    assert names == {"beat:guide-add-every-minute", "ujobs.purge.hourly"}
    assert not (tmp_path / "home").exists()  # no embedded Postgres was started


def test_jobs_commands_take_dash_a_for_the_apps_database_and_dsn_wins(
    dsn: str, tmp_path: Path
) -> None:
    from apps.guide_proj.tasks import add

    with bound(add.app, dsn):
        sent = add.delay(4, 5)
    result = run("jobs", "ls", "-A", APP, "--json", app_dsn=dsn, tmp_path=tmp_path)
    uses_app_database(result, dsn)
    rows = json.loads(result.stdout)
    assert [(r["name"], r["queue"]) for r in rows] == [("apps.guide_proj.tasks.add", "guide")]
    shown = run("jobs", "show", rows[0]["id"], "-A", APP, "--json", app_dsn=dsn, tmp_path=tmp_path)
    uses_app_database(shown, dsn)
    stats = run("jobs", "stats", "-A", APP, "--json", app_dsn=dsn, tmp_path=tmp_path)
    uses_app_database(stats, dsn)
    assert [(r["queue"], r["jobs"]) for r in json.loads(stats.stdout)] == [("guide", 1)]
    # --dsn wins over the app's URL (which here names a database that does not exist)
    bogus = dsn.rsplit("/", 1)[0] + "/ujb_no_such_database"
    flagged = run("jobs", "ls", "-A", APP, "--dsn", dsn, app_dsn=bogus, tmp_path=tmp_path)
    assert flagged.returncode == 0, flagged.stderr
    assert "(--dsn)" in flagged.stderr and "1 job(s)" in flagged.stdout
    unflagged = run("jobs", "ls", "-A", APP, app_dsn=bogus, tmp_path=tmp_path)
    assert (
        unflagged.returncode != 0 and "ujb_no_such_database" in unflagged.stdout + unflagged.stderr
    )
    assert sent.id


def test_migrate_quarantine_takes_dash_a_for_the_apps_database(
    dsn: str, db: psycopg.Connection[tuple[object, ...]], tmp_path: Path
) -> None:
    from migrate import quarantine as store
    from migrate.decoding import Poison

    with connections.connect(dsn, connections.Role("test")) as conn:
        store.put(
            conn,
            broker="redis",
            queue="guide",
            fmt="redis",
            raw=b'{"not": "a celery message"}',
            meta=None,
            poison=Poison("unknown_task", "no task apps.guide_proj.tasks.gone", task="gone"),
        )
    result = run("migrate", "quarantine", "ls", "-A", APP, "--json", app_dsn=dsn, tmp_path=tmp_path)
    uses_app_database(result, dsn)
    found = json.loads(result.stdout)
    assert [e["reason"] for e in found["entries"]] == ["unknown_task"]
    entry_id = str(found["entries"][0]["id"])
    shown = run(
        "migrate",
        "quarantine",
        "show",
        entry_id,
        "-A",
        APP,
        "--json",
        app_dsn=dsn,
        tmp_path=tmp_path,
    )
    uses_app_database(shown, dsn)
    discarded = run(
        "migrate", "quarantine", "discard", entry_id, "-A", APP, app_dsn=dsn, tmp_path=tmp_path
    )
    uses_app_database(discarded, dsn)


def test_migrate_and_beat_convert_find_the_guide_layout_app(dsn: str, tmp_path: Path) -> None:
    """``migrate -A proj`` drains the app's broker (Redis db 11, its ``guide`` queue, empty here)
    into the app's database; ``beat convert -A proj`` reads its beat schedule."""
    import redis

    redis.Redis.from_url(redis_url(11)).delete("guide")
    drained = run("migrate", "-A", APP, app_dsn=dsn, tmp_path=tmp_path)
    uses_app_database(drained, dsn)
    output = drained.stdout + drained.stderr
    assert "draining guide from redis://" in output and redis_url(11).rsplit("@")[-1] in output, (
        output
    )
    converted = run("beat", "convert", "-A", APP, "--json", app_dsn=dsn, tmp_path=tmp_path)
    assert converted.returncode == 0, converted.stderr
    (entry,) = json.loads(converted.stdout)
    assert (entry["engine_task"], entry["ok"]) == ("beat:guide-add-every-minute", True)


def test_a_module_with_no_app_is_refused_naming_everything_tried(dsn: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        loading.load("apps")
    text = caught.value.render()
    for tried in (
        "@ujobs_bridge.job functions and task()s in apps",
        "apps.app, then apps.celery",
        "the submodule apps.celery",
        "any attribute of apps that is a Celery app",
    ):
        assert tried in text, text
    for args in (
        ["worker", "-A", "apps", "--dsn", dsn],
        ["tasks", "ls", "-A", "apps", "--dsn", dsn],
        ["scheduler", "-A", "apps", "--dsn", dsn],
        ["jobs", "ls", "-A", "apps"],
        ["migrate", "quarantine", "ls", "-A", "apps"],
        ["migrate", "-A", "apps", "--dsn", dsn],
        ["beat", "convert", "-A", "apps"],
    ):
        result = run(*args, app_dsn=None, tmp_path=tmp_path)
        assert result.returncode != 0, args
        assert "holds no" in result.stderr, (args, result.stderr)
        assert "the submodule apps.celery" in result.stderr, (args, result.stderr)
    assert not (tmp_path / "home").exists()


def test_the_package_declares_what_kombus_redis_transport_imports() -> None:
    """An app whose ``broker_url`` is ``redis://`` imports kombu's redis transport at its first
    ``.delay()`` (Celery's sender builds an event dispatcher on it); that transport imports
    ``redis`` and ``packaging``, which only kombu's ``redis`` extra brings. A plain ``pip install``
    of this package must bring them."""
    import importlib.metadata

    from packaging.requirements import Requirement

    declared = {
        Requirement(r).name: Requirement(r)
        for r in importlib.metadata.requires("ujobs-bridge") or []
        if "extra ==" not in r
    }
    assert "redis" in declared["kombu"].extras
    assert {"packaging", "redis"} <= declared.keys()
    kombu_needs = {
        Requirement(r).name
        for r in importlib.metadata.requires("kombu") or []
        if 'extra == "redis"' in r
    }
    assert kombu_needs <= {"redis", "packaging"}, kombu_needs
