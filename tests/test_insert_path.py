"""Every job row is inserted by ONE statement (the ``x_jobs_insert`` function of migration 0008),
so the single and the batch paths write the same columns: a Celery message for a revoked task id
is born ``cancelled`` with ``finished_at`` and ``last_error`` whichever path wrote it, and the
retention purge deletes it like any finished job."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from apps import celery_tasks as t
from apps.celery_harness import bound, celery_listeners_closed  # noqa: F401
from celery_compat import enqueue_in
from ujobs_bridge.purge import run_pass

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app


def _row(conn: psycopg.Connection[Any], task_id: str) -> tuple[Any, ...]:
    row = conn.execute(
        "select j.state, j.last_error, j.finished_at is not null, j.finished_at"
        "  from x_jobs j where j.input -> 'headers' ->> 'id' = %s",
        (task_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_message_for_a_revoked_task_id_is_born_finished_and_purged(
    app: Any, dsn: str, batch: bool
) -> None:
    app.control.revoke("revoked-before-send")
    with psycopg.connect(dsn) as conn:
        with enqueue_in(conn, batch=batch):
            t.add.apply_async((1, 2), task_id="revoked-before-send")
            t.add.apply_async((3, 4), task_id="not-revoked")
        conn.commit()
        state, error, finished, finished_at = _row(conn, "revoked-before-send")
        assert (state, finished) == ("cancelled", True)
        assert error == "UJ_JOB_CANCELLED: task id was revoked"
        assert _row(conn, "not-revoked")[:3] == ("ready", None, False)
        report = run_pass(conn, finished_at + timedelta(seconds=1))
        conn.commit()
        assert report["x_jobs"] == 1
        left = conn.execute("select count(*) from x_jobs where state = 'cancelled'").fetchone()
        assert left == (0,)


def test_only_the_insert_function_inserts_job_rows() -> None:
    """The column list of a job row is written once: no other statement inserts into x_jobs
    (0012 replaces x_jobs_insert with the same insert, which now also wakes the workers; 0017
    gives it a single-row branch with the same columns; 0021 wakes only waiting workers)."""
    inserting = re.compile(r"insert\s+into\s+x_jobs\b", re.IGNORECASE)
    found = sorted(
        str(path.relative_to(ROOT))
        for package in ("ujobs_bridge", "celery_compat", "migrate")
        for path in (ROOT / package).rglob("*.sql")
        if inserting.search(path.read_text(encoding="utf-8"))
        and not path.name.startswith(("0001_", "0002_", "0003_", "0004_", "0005_", "0006_"))
    )
    assert found == [
        "ujobs_bridge/db/migrations/0008_job_insert.sql",
        "ujobs_bridge/db/migrations/0012_lean_jobs.sql",
        "ujobs_bridge/db/migrations/0017_insert_one_row.sql",
        "ujobs_bridge/db/migrations/0021_queue_waiters.sql",
    ]
