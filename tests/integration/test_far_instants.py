"""One range for time: instants outside years 1..9999 (in UTC, a day of margin) never enter a row,
and a row that holds one anyway (written by hand) neither poisons a claim nor blinds a reader.

An ``eta`` of year 1 at +14:00 is year 0 (1 BC) in UTC, and 9999-12-31 23:59 at -12:00 is year
10000: ``apply_async`` and the engine's ``enqueue`` refuse both (and countdowns and expiries that
land there) with ``UJ_JOB_OPTION_INVALID`` and a hint, writing nothing. Rows whose ``run_at`` is
``-infinity``, 1 BC or year 10000 (set by hand) sit among 30 jobs a real worker process claims:
every batch-mate runs once (no ``UJ_WORKER_LOST``), the due odd rows run too, and the dashboard
(``/``, ``/jobs``, the job's page, ``/metrics``) and ``jobs ls/show/stats/cancel`` show them.
Real Postgres, a real ``ujobs-bridge worker`` and a real dashboard process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from dashboard_support import Dashboard
from worker_proc import TESTS_DIR, WorkerProc

from apps import basic_jobs as b
from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from conftest import wait_for
from ujobs_bridge.client import Client
from ujobs_bridge.errors import ErrorCode, UjobsError

PLUS_14 = timezone(timedelta(hours=14))
MINUS_12 = timezone(timedelta(hours=-12))
YEAR_1_AT_PLUS_14 = datetime(1, 1, 1, tzinfo=PLUS_14)  # 1 BC in UTC
LAST_MINUTE_AT_MINUS_12 = datetime(9999, 12, 31, 23, 59, tzinfo=MINUS_12)  # year 10000 in UTC


def rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("select id, state from x_jobs").fetchall()


def refused_clearly(error: pytest.ExceptionInfo[UjobsError]) -> None:
    assert error.value.code == ErrorCode.JOB_OPTION_INVALID
    assert "outside the instants a row can hold" in error.value.message
    assert "9999" in error.value.hint


@pytest.mark.parametrize("when", [YEAR_1_AT_PLUS_14, LAST_MINUTE_AT_MINUS_12], ids=["bc", "y10000"])
def test_an_instant_outside_years_1_to_9999_in_utc_is_refused_at_the_engine(
    dsn: str, client: Client, when: datetime
) -> None:
    with pytest.raises(UjobsError) as at_run:
        b.add.configure(client=client, run_at=when).enqueue(1, 2)
    refused_clearly(at_run)
    with pytest.raises(UjobsError) as at_expiry:
        b.add.configure(client=client, expires=when).enqueue(1, 2)
    refused_clearly(at_expiry)
    assert rows(dsn) == []
    near = when + timedelta(days=2) if when.year == 1 else when - timedelta(days=2)
    b.add.configure(client=client, run_at=near).enqueue(1, 2)  # inside the range: accepted
    assert len(rows(dsn)) == 1


OUT_OF_RANGE_SENDS: list[dict[str, Any]] = [
    {"eta": YEAR_1_AT_PLUS_14},
    {"eta": LAST_MINUTE_AT_MINUS_12},
    {"countdown": 1e12},  # seconds: year 33715
    {"countdown": -1e11},  # seconds: 1200 BC
    {"expires": 1e12},
    {"expires": YEAR_1_AT_PLUS_14},
]


def test_an_eta_countdown_or_expiry_outside_the_range_is_refused_by_apply_async(dsn: str) -> None:
    with bound(t.app, dsn):
        for options in OUT_OF_RANGE_SENDS:
            with pytest.raises(UjobsError) as refused:
                t.add.apply_async((1, 2), **options)
            refused_clearly(refused)
        t.add.apply_async((1, 2), countdown=60)  # the sender still sends
    assert len(rows(dsn)) == 1


ODD_RUN_ATS = {
    "minus-infinity": "-infinity",
    "bc": "0001-12-31 10:00:00+00 BC",
    "year-10000": "10000-01-01 11:59:00+00",
}


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR), COLUMNS="")
    env.pop("UJOBS_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args, "--dsn", dsn],
        capture_output=True, text=True, env=env, cwd=TESTS_DIR, timeout=60,
    )  # fmt: skip


def test_a_row_with_an_instant_python_cannot_hold_fails_no_claim_and_every_reader_shows_it(
    dsn: str, client: Client, tmp_path: Path
) -> None:
    mates = {b.add.configure(client=client).enqueue(i, i).id for i in range(30)}
    odd = {name: b.add.configure(client=client).enqueue(0, 0).id for name in ODD_RUN_ATS}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, text in ODD_RUN_ATS.items():  # written by hand, as no sender can any more
            conn.execute(
                "update x_jobs set run_at = %s::timestamptz where id = %s", (text, odd[name])
            )
    worker = WorkerProc(dsn, "apps.basic_jobs", "basic", tmp_path / "worker.log")
    due = mates | {odd["minus-infinity"], odd["bc"]}

    def finished() -> dict[UUID, tuple[str, int, str | None]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            got = conn.execute(
                "select id, state, attempt, last_error from x_jobs"
                " where state not in ('ready', 'running')"
            ).fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in got}

    try:
        wait_for(lambda: set(finished()) >= due, timeout=60, what="every due job to finish")
        ended = finished()
        assert {ended[i] for i in due} == {("done", 1, None)}, worker.output()
        assert "UJ_WORKER_LOST" not in worker.output()
        worker.term()
        assert worker.wait(30) == 0, worker.output()
    finally:
        worker.close()
    assert odd["year-10000"] not in ended  # never due: still ready

    dash = Dashboard(dsn, tmp_path / "dashboard.log")
    try:
        for path in ("/", "/jobs", "/jobs?state=ready"):
            status, _page = dash.request(path)
            assert status == 200, (path, dash.proc.output())
        status, page = dash.request("/jobs")
        assert "-infinity" in page and "10000-01-01 11:59:00+00" in page
        for name, text in ODD_RUN_ATS.items():
            status, page = dash.request(f"/jobs/{odd[name]}")
            assert status == 200 and text in page, (name, dash.proc.output())
        status, metrics = dash.request("/metrics")
        assert status == 200 and "ujobs_database_up 1.0" in metrics, metrics
    finally:
        dash.proc.close()

    listed = _cli(dsn, "jobs", "ls")
    assert listed.returncode == 0, listed.stderr
    for name, ident in odd.items():
        assert str(ident) in listed.stdout, name
    assert "-infinity" in listed.stdout and "10000-01-01 11:59:00+00" in listed.stdout
    shown = _cli(dsn, "jobs", "show", str(odd["year-10000"]), "--json")
    assert shown.returncode == 0, shown.stderr
    assert '"run_at": "10000-01-01 11:59:00+00"' in shown.stdout
    stats = _cli(dsn, "jobs", "stats", "--json")
    assert stats.returncode == 0 and '"oldest_run_at": "-infinity"' in stats.stdout, stats.stderr
    cancelled = _cli(dsn, "jobs", "cancel", str(odd["year-10000"]))
    assert cancelled.returncode == 0, cancelled.stderr
    assert finished()[odd["year-10000"]][0] == "cancelled"
