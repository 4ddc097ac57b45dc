"""Retention: the ``ujobs.purge`` job deletes only terminal rows older than the cutoff, with one
cutoff per pass, and a pass killed between two tables resumes at the table it stopped on.

Why it exists: reliability F16 and the seed's purge bug (F7): a cutoff read from a frozen or
skewed clock a year ahead of the database deleted rows that were still young. Rows are placed
at known ages relative to the DATABASE clock (the clock that stamped ``finished_at``); the job
runs in-process under a frozen clock, and in real worker subprocesses for the kill.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from worker_proc import WorkerProc

from conftest import TESTS_DIR, wait_for
from ujobs_bridge import FrozenClock, PurgeTarget, Worker, WorkerConfig, connect, purge
from ujobs_bridge.errors import ErrorCode

Db = psycopg.Connection[Any]
DAY = timedelta(days=1)
WEEK_S = 7 * 86400.0
LIVE = ("ready", "running", "sleeping", "waiting")
PURGE_MODULE = sys.modules[
    "ujobs_bridge._internal.jobs.purge"
]  # where the root's ``purge`` job lives


@pytest.fixture
def pdb(db: Db) -> Db:
    db.execute("truncate x_outbox restart identity")
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    db.execute(
        "truncate x_celery_results, x_celery_counters, x_celery_chord_parts, x_celery_tasks, x_celery_revoked"
    )
    return db


def db_now(db: Db) -> datetime:
    row = db.execute("select now()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def add_job(db: Db, label: str, state: str, age: timedelta | None, now: datetime) -> uuid.UUID:
    """A job row in ``state``; terminal ones finished ``age`` ago, live ones were created then."""
    job_id = uuid.uuid4()
    finished = now - age if age is not None and state not in LIVE else None
    created = now - (age or timedelta(0)) - DAY
    db.execute(
        "insert into x_jobs (id, name, queue, input, state, max_attempts, run_at, created_at, finished_at,"
        " lease_token, lease_expires_at)"
        " values (%s, 'tests.retention', 'retention', %s, %s, 3, %s, %s, %s, %s, %s)",
        (
            job_id,
            json.dumps({"label": label}),
            state,
            created,
            created,
            finished,
            uuid.uuid4() if state == "running" else None,
            now + DAY if state == "running" else None,
        ),
    )
    return job_id


def labels(db: Db) -> set[str]:
    return {
        r[0]
        for r in db.execute("select input->>'label' from x_jobs where name = 'tests.retention'")
    }


def add_event(
    db: Db, label: str, age: timedelta, now: datetime, consumed_by: uuid.UUID | None = None
) -> None:
    db.execute(
        "insert into x_job_events (event, correlation_key, payload, created_at, consumed_by, consumed_step)"
        " values ('retention', %s, '{}', %s, %s, %s)",
        (label, now - age, consumed_by, "wait" if consumed_by else None),
    )


def events(db: Db) -> set[str]:
    return {
        r[0]
        for r in db.execute("select correlation_key from x_job_events where event = 'retention'")
    }


def seed(db: Db, now: datetime) -> dict[str, uuid.UUID]:
    ids = {}
    for label, state, age in [
        ("done-old", "done", 8 * DAY),
        ("dead-old", "dead", 8 * DAY),
        ("cancelled-old", "cancelled", 8 * DAY),
        ("done-young", "done", 6 * DAY),
        ("done-just-now", "done", timedelta(minutes=1)),
        ("ready-old", "ready", 30 * DAY),
        ("running-old", "running", 30 * DAY),
        ("sleeping-old", "sleeping", 30 * DAY),
        ("waiting-old", "waiting", 30 * DAY),
    ]:
        ids[label] = add_job(db, label, state, age, now)
    db.execute(
        "insert into x_job_counts (minute, queue, backend, done) values"
        " (date_trunc('minute', %s::timestamptz), 'retention', 1, 1),"
        " (date_trunc('minute', %s::timestamptz), 'retention', 1, 1)",
        (now - 8 * DAY, now - 6 * DAY),
    )
    db.execute(
        "insert into x_job_failure_counts (minute, queue, backend, kind, jobs) values"
        " (date_trunc('minute', %s::timestamptz), 'retention', 1, 'FAILURE', 1),"
        " (date_trunc('minute', %s::timestamptz), 'retention', 1, 'FAILURE', 1)",
        (now - 8 * DAY, now - 6 * DAY),
    )
    add_event(db, "event-old", 8 * DAY, now)
    add_event(db, "event-young", 6 * DAY, now)
    add_event(db, "event-old-held-by-live-job", 8 * DAY, now, consumed_by=ids["waiting-old"])
    add_event(db, "event-old-held-by-finished-job", 8 * DAY, now, consumed_by=ids["done-young"])
    for label, published in [
        ("outbox-old", now - 8 * DAY),
        ("outbox-young", now - 6 * DAY),
        ("outbox-unpublished", None),
    ]:
        db.execute(
            "insert into x_outbox (job_id, name, queue, input, max_attempts, created_at, published_at)"
            " values (%s, %s, 'retention', '{}', 3, %s, %s)",
            (uuid.uuid4(), label, now - 30 * DAY, published),
        )
    for task, occurrences in [("hourly", [10, 9, 8]), ("monthly", [40])]:
        for days in occurrences:
            db.execute(
                "insert into x_scheduler_fires (task, occurrence_at, catch_up, job_ids, fired_at)"
                " values (%s, %s, false, '{}', %s)",
                (task, now - days * DAY, now - days * DAY),
            )
    for key, expired in [
        ("celery-task-meta-expired-long-ago", now - 8 * DAY),
        ("celery-task-meta-expired-yesterday", now - DAY),
        ("celery-task-meta-no-expiry", None),
    ]:
        db.execute(
            "insert into x_celery_results (key, value, expires_at) values (%s, '{}', %s)",
            (key, expired),
        )
    for days in (8, 1):  # Celery's events (x_celery_events): the week-old one goes
        db.execute(
            "insert into x_celery_events (type, hostname, at, fields)"
            " values ('worker-heartbeat', 'n@h', %s, '{}')",
            (now - days * DAY,),
        )
    return ids


def results(db: Db) -> set[str]:
    return {r[0] for r in db.execute("select key from x_celery_results")}


SURVIVORS = {
    "done-young",
    "done-just-now",
    "ready-old",
    "running-old",
    "sleeping-old",
    "waiting-old",
}


def run_purge(dsn: str, clock: FrozenClock, **kwargs: Any) -> dict[str, Any]:
    with connect(dsn, upgrade=False, clock=clock) as client:
        ref = purge.configure(client=client).enqueue(**kwargs)
    worker = Worker(dsn, {purge.name: purge}, WorkerConfig(queues=("ujobs",)), clock=clock)
    try:
        worker.tick()
    finally:
        worker.stop(timeout_s=5)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select state, output, last_error from x_jobs where id = %s", (ref.id,)
        ).fetchone()
    assert row is not None
    return {"state": row[0], "output": row[1], "error": row[2]}


@pytest.mark.parametrize(
    "ahead", [timedelta(0), 365 * DAY], ids=["clock-at-db-time", "clock-a-year-ahead"]
)
def test_purge_deletes_only_expired_terminal_rows(dsn: str, pdb: Db, ahead: timedelta) -> None:
    now = db_now(pdb)
    ids = seed(pdb, now)
    result = run_purge(dsn, FrozenClock(now + ahead), older_than_s=WEEK_S)
    assert result["state"] == "done", result
    assert result["output"] == {
        "x_jobs": 3,
        "x_job_counts": 1,
        "x_job_failure_counts": 1,
        "x_job_events": 2,
        "x_outbox": 1,
        "x_scheduler_fires": 2,
        "x_celery": 1,
        "x_celery_events": 1,
    }
    assert results(pdb) == {"celery-task-meta-expired-yesterday", "celery-task-meta-no-expiry"}
    assert labels(pdb) == SURVIVORS  # never a live row, never one younger than the cutoff
    assert events(pdb) == {"event-young", "event-old-held-by-live-job"}
    assert {r[0] for r in pdb.execute("select name from x_outbox")} == {
        "outbox-young",
        "outbox-unpublished",
    }
    fires = sorted(
        (r[0], r[1]) for r in pdb.execute("select task, occurrence_at from x_scheduler_fires")
    )
    assert fires == [
        ("hourly", now - 8 * DAY),
        ("monthly", now - 40 * DAY),
    ]  # each task's latest stays
    assert ids["waiting-old"]


def test_a_clock_behind_the_database_deletes_less_never_more(dsn: str, pdb: Db) -> None:
    now = db_now(pdb)
    seed(pdb, now)
    result = run_purge(dsn, FrozenClock(now - 2 * DAY), older_than_s=WEEK_S)  # cutoff: 9 days ago
    assert result["output"]["x_jobs"] == 0
    assert labels(pdb) >= {"done-old", "dead-old", "cancelled-old"}


def test_two_purge_targets_under_one_name_are_refused_before_the_first_delete(
    dsn: str, pdb: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = db_now(pdb)
    seed(pdb, now)
    deleted: list[str] = []

    def delete(conn: Db, cutoff: datetime) -> int:
        deleted.append("clash")
        return 0

    clash = PurgeTarget("x_outbox", delete)
    monkeypatch.setattr(PURGE_MODULE, "_extra", [lambda: [clash]])
    result = run_purge(dsn, FrozenClock(now), older_than_s=WEEK_S)
    assert result["state"] == "ready" and ErrorCode.PURGE_TARGET_DUPLICATE.value in result["error"]
    assert "done-old" in labels(pdb) and deleted == []  # nothing deleted anywhere
    assert pdb.execute("select count(*) from x_job_steps").fetchone() == (0,)


def test_purge_cli_by_hand(dsn: str, pdb: Db) -> None:
    seed(pdb, db_now(pdb))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ujobs_bridge",
            "purge",
            "--older-than",
            "7d",
            "--json",
            "--dsn",
            dsn,
        ],
        capture_output=True,
        text=True,
        cwd=TESTS_DIR,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["deleted"]["x_jobs"] == 3
    assert labels(pdb) == SURVIVORS
    bad = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "purge", "--older-than", "soon", "--dsn", dsn],
        capture_output=True,
        text=True,
        cwd=TESTS_DIR,
        timeout=60,
    )
    assert bad.returncode == 2 and "hint:" in bad.stderr


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(faults: str = "") -> WorkerProc:
        proc = WorkerProc(
            dsn, "apps.outbox_jobs", "ujobs", tmp_path / f"w{len(started)}.log", faults=faults
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- worker {proc.pid} (exit {proc.proc.returncode}) ---\n{proc.output()[-3000:]}")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_pass_killed_between_tables_resumes_at_the_table_it_stopped_on(
    dsn: str, pdb: Db, workers: Any
) -> None:
    now = db_now(pdb)
    seed(pdb, now)
    with connect(dsn, upgrade=False) as client:
        ref = purge.configure(client=client).enqueue(older_than_s=WEEK_S)
    first = workers("purge.between_tables=kill@1")  # dies right after the x_jobs step is stored
    assert first.wait(timeout=30) == -9, first.output()
    assert labels(pdb) == SURVIVORS and "event-old" in events(pdb)

    # Expired rows that appear now: x_jobs is finished for this pass, x_job_events is not.
    add_job(pdb, "done-old-late", "done", 8 * DAY, db_now(pdb))
    add_event(pdb, "event-old-late", 8 * DAY, db_now(pdb))
    workers()  # rescues the pass after the 2 s lease and resumes it
    wait_for(
        lambda: (
            pdb.execute("select state from x_jobs where id = %s", (ref.id,)).fetchone() == ("done",)
        ),
        timeout=45,
        what="the resumed purge to finish",
    )
    steps = dict(
        pdb.execute(
            "select name, job_attempt from x_job_steps where run_id = %s", (ref.id,)
        ).fetchall()
    )
    assert steps == {
        "cutoff": 1,
        "purge:x_jobs": 1,
        "purge:x_job_counts": 2,
        "purge:x_job_failure_counts": 2,
        "purge:x_job_events": 2,
        "purge:x_outbox": 2,
        "purge:x_scheduler_fires": 2,
        "purge:x_celery": 2,
        "purge:x_celery_events": 2,
    }
    assert "done-old-late" in labels(pdb)  # the x_jobs step was not run again
    assert events(pdb) == {"event-young", "event-old-held-by-live-job"}  # the next table ran
    output = pdb.execute("select output, attempt from x_jobs where id = %s", (ref.id,)).fetchone()
    assert output is not None and output[0]["x_jobs"] == 3 and output[1] == 2
