"""The dashboard's history in a real headless Chromium: the overview's pick-up latency chart shows,
per minute, the mean and the largest wait from due to claim of jobs a real worker picked (the
figures the database recorded at each claim), and a job's page lists every attempt (number,
worker, claim and end times, outcome, its own error with traceback, shown as text); ``jobs show
--json`` carries the same attempts; the jobs list pages by key through jobs created in one
transaction without losing or repeating one; a rescued attempt is recorded as lost, and a job's
attempts go with it when it is discarded or purged. Screenshots: ``artifacts/dashboard/``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import TESTS_DIR
from dashboard_support import Dashboard, browser, screenshot

from conftest import wait_for
from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge._internal.dashboard.views import latency_text
from ujobs_bridge._internal.db import bulk, retention
from ujobs_bridge._internal.db import job_reads as reads_db
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db import steering as steering_db
from ujobs_bridge.client import Client
from ujobs_bridge.records import JobState, Settlement
from ujobs_bridge.testing import run_until_idle

pytestmark = pytest.mark.timeout(300)

CALLS: dict[str, int] = defaultdict(int)


@job(queue="history", max_attempts=3, backoff=0, jitter=False)
def third_time_lucky(key: str) -> str:
    CALLS[key] += 1
    if CALLS[key] < 3:
        raise RuntimeError(f"attempt {CALLS[key]} <b>failed</b> for {key}")
    return f"done on attempt {CALLS[key]}"


@job(queue="history")
def quick(n: int) -> int:
    return n


@pytest.fixture
def started() -> Iterator[list[Any]]:
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        thing.quit() if hasattr(thing, "quit") else thing.close()


def _worker(dsn: str) -> Worker:
    return Worker(
        dsn,
        {quick.name: quick, third_time_lucky.name: third_time_lucky},
        WorkerConfig(queues=("history",)),
        worker_id="history-worker-1",
    )


def test_the_latency_chart_shows_each_minutes_mean_and_largest_wait(
    dsn: str, client: Client, db: psycopg.Connection[Any], tmp_path: Path, started: list[Any]
) -> None:
    refs = [quick.configure(client=client).enqueue(i) for i in range(4)]
    # Due 0, 0, 30 and 90 seconds before the worker starts (created that long ago).
    for ref, age in zip(refs, (0, 0, 30, 90), strict=True):
        db.execute(
            "update x_jobs set created_at = now() - %s, run_at = now() - %s where id = %s",
            (timedelta(seconds=age), timedelta(seconds=age), ref.id),
        )
    run_until_idle(_worker(dsn))
    # What the database says each job waited: its claim (the attempt's claimed_at) less when it
    # was due (the later of run_at and created_at), per minute of claim.
    rows = db.execute(
        "select date_trunc('minute', a.claimed_at),"
        "       extract(epoch from a.claimed_at - greatest(j.run_at, j.created_at))::float8"
        "  from x_job_attempts as a join x_jobs as j on j.id = a.job_id"
    ).fetchall()
    assert len(rows) == 4
    per_minute: dict[datetime, list[float]] = defaultdict(list)
    for minute, wait in rows:
        per_minute[minute].append(max(0.0, wait))
    waits = [w for _, w in rows]
    assert max(waits) >= 90.0 and sorted(waits)[2] >= 30.0

    dash = Dashboard(dsn, tmp_path / "dash.log")
    started.append(dash)
    driver_ = browser()
    started.append(driver_)
    from selenium.webdriver.common.by import By

    driver_.get(dash.base + "/")
    card = driver_.find_element(By.ID, "latency")
    shown = {
        g.get_attribute("data-minute"): (
            int(g.get_attribute("data-picked")),
            float(g.get_attribute("data-mean-s")),
            float(g.get_attribute("data-max-s")),
        )
        for g in card.find_elements(By.CSS_SELECTOR, "g.minute")
    }
    expected = {
        minute.astimezone(UTC).strftime("%H:%M"): (len(w), sum(w) / len(w), max(w))
        for minute, w in per_minute.items()
    }
    assert shown.keys() == expected.keys(), (shown, expected)
    for minute, (picked, mean, largest) in expected.items():
        assert shown[minute][0] == picked
        assert shown[minute][1] == pytest.approx(mean, abs=0.001)
        assert shown[minute][2] == pytest.approx(largest, abs=0.001)
    stat = {
        s.get_attribute("data-stat"): s.text
        for s in card.find_elements(By.CSS_SELECTOR, "[data-stat]")
    }
    assert stat == {
        "max": latency_text(max(waits)),
        "mean": latency_text(sum(waits) / len(waits)),
        "picked": "4",
    }
    titles = [t.get_attribute("textContent") for t in card.find_elements(By.TAG_NAME, "title")]
    assert any(f"max {latency_text(max(waits))}" in t for t in titles), titles
    screenshot(driver_, "overview-latency")


def test_a_jobs_page_lists_every_attempt_with_its_own_error(
    dsn: str, client: Client, db: psycopg.Connection[Any], tmp_path: Path, started: list[Any]
) -> None:
    ref = third_time_lucky.configure(client=client).enqueue("k1")
    run_until_idle(_worker(dsn))
    assert db.execute("select state from x_jobs where id = %s", (ref.id,)).fetchone() == ("done",)
    recorded = db.execute(
        "select attempt, worker, claimed_at, finished_at, outcome, error from x_job_attempts"
        " where job_id = %s order by attempt",
        (ref.id,),
    ).fetchall()
    assert [(r[0], r[1], r[4]) for r in recorded] == [
        (1, "history-worker-1", "retried"),
        (2, "history-worker-1", "retried"),
        (3, "history-worker-1", "done"),
    ]
    dash = Dashboard(dsn, tmp_path / "dash.log")
    started.append(dash)
    driver_ = browser()
    started.append(driver_)
    from selenium.webdriver.common.by import By

    driver_.get(f"{dash.base}/jobs/{ref.id}")
    rows = driver_.find_elements(By.CSS_SELECTOR, "#attempts tr.attempt")
    cells = [[c.text for c in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    assert [(c[0], c[1], c[5]) for c in cells] == [
        ("1", "history-worker-1", "retried"),
        ("2", "history-worker-1", "retried"),
        ("3", "history-worker-1", "done"),
    ]
    for c, r in zip(cells, recorded, strict=True):
        assert c[2] == r[2].isoformat(timespec="milliseconds")
        assert c[3] == r[3].isoformat(timespec="milliseconds")
        assert c[4] == f"{(r[3] - r[2]).total_seconds():.3f} s"
    errors = {
        e.get_attribute("data-attempt"): e.text
        for e in driver_.find_elements(By.CSS_SELECTOR, "#attempts tr.attempt-error")
    }
    assert set(errors) == {"1", "2"}  # the attempt that succeeded has no error
    for n in ("1", "2"):
        assert errors[n].startswith("Traceback (most recent call last):"), errors[n]
        assert f"RuntimeError: attempt {n} <b>failed</b> for k1" in errors[n]  # text, not markup
        assert f"attempt {3 - int(n)} <b>" not in errors[n]  # each attempt its own error
    assert driver_.find_elements(By.CSS_SELECTOR, "#attempts b") == []
    screenshot(driver_, "job-attempts")

    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR), COLUMNS="")
    env.pop("UJOBS_DATABASE_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "jobs", "show", str(ref.id), "--json", "--dsn", dsn],
        capture_output=True, text=True, env=env, cwd=TESTS_DIR, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)["attempts"]
    assert [(a["attempt"], a["outcome"], a["worker"]) for a in shown] == [
        (1, "retried", "history-worker-1"),
        (2, "retried", "history-worker-1"),
        (3, "done", "history-worker-1"),
    ]
    assert shown[0]["error"] == recorded[0][5] and shown[2]["error"] is None
    table = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "jobs", "show", str(ref.id), "--dsn", dsn],
        capture_output=True, text=True, env=env, cwd=TESTS_DIR, timeout=60,
    )  # fmt: skip
    assert "3 attempt(s)" in table.stdout and "attempt 2 <b>failed</b> for k1" in table.stdout


def test_the_jobs_list_pages_by_key_through_one_transactions_jobs(
    client: Client, db: psycopg.Connection[Any]
) -> None:
    refs = client.enqueue_many(quick.call(i) for i in range(7))  # one statement, one now()
    assert len({r[0] for r in db.execute("select created_at from x_jobs").fetchall()}) == 1
    seen: list[Any] = []
    before = None
    while True:
        page = reads_db.job_list(db, state=None, queue="history", name=None, limit=3, before=before)
        seen.extend(r.id for r in page)
        if len(page) < 3:
            break
        before = (page[-1].created_at, page[-1].id)
    assert seen == sorted(r.id for r in refs)  # created together: by id, none lost or repeated
    everything = reads_db.job_list(db, state=None, queue="history", name=None, limit=50)
    assert [r.id for r in everything] == seen


def test_a_rescued_attempt_is_recorded_lost_and_attempts_go_with_their_job(
    dsn: str, client: Client, db: psycopg.Connection[Any]
) -> None:
    ref = quick.configure(client=client).enqueue(1)
    token = uuid.uuid4()
    claim = leases_db.ClaimParams("history", [quick.name], 1, token, 0.05, "gone-worker")
    assert [c.id for c in leases_db.job_claim(db, claim)] == [ref.id]
    wait_for(
        lambda: leases_db.job_rescue(db, limit=10, error="UJ_LEASE_EXPIRED: test", now=None),
        timeout=30,
        what="the lease to run out and the rescue to take the job back",
    )
    assert db.execute(
        "select attempt, worker, outcome, error, claimed_at is not null from x_job_attempts"
        " where job_id = %s",
        (ref.id,),
    ).fetchall() == [(1, "gone-worker", "lost", "UJ_LEASE_EXPIRED: test", True)]
    # A discarded dead letter takes its attempts along; so does the purge of a finished job.
    db.execute("update x_jobs set state = 'dead' where id = %s", (ref.id,))
    assert bulk.job_discard_matching(db, bulk.JobFilter(ids=[ref.id])) == 1
    assert db.execute("select count(*) from x_job_attempts").fetchone() == (0,)
    other = quick.configure(client=client).enqueue(2)
    run_until_idle(_worker(dsn))
    assert db.execute("select count(*) from x_job_attempts").fetchone() == (1,)
    db.execute(
        "update x_jobs set finished_at = now() - interval '30 days' where id = %s", (other.id,)
    )
    retention.purge_jobs(db, retention.PurgeBatch(datetime.now(UTC) - timedelta(days=7), 100))
    assert db.execute("select count(*) from x_jobs").fetchone() == (0,)
    assert db.execute("select count(*) from x_job_attempts").fetchone() == (0,)


def test_a_cancelled_running_attempt_is_recorded_and_its_late_settle_adds_nothing(
    client: Client, db: psycopg.Connection[Any]
) -> None:
    one = quick.configure(client=client).enqueue(1)
    two = quick.configure(client=client).enqueue(2)
    waiting = quick.configure(client=client).enqueue(3)
    token = uuid.uuid4()
    claim = leases_db.ClaimParams("history", [quick.name], 2, token, 30, "busy-worker")
    assert {c.id for c in leases_db.job_claim(db, claim)} == {one.id, two.id}
    assert steering_db.job_cancel(db, one.id, "UJ_JOB_CANCELLED: by hand")
    assert bulk.job_cancel_matching(db, bulk.JobFilter(ids=[two.id, waiting.id]), "bulk") == 2
    recorded = db.execute(
        "select job_id, attempt, worker, outcome, error, claimed_at is not null"
        " from x_job_attempts order by error"
    ).fetchall()
    assert recorded == [  # the never-claimed job had no attempt to record
        (one.id, 1, "busy-worker", "cancelled", "UJ_JOB_CANCELLED: by hand", True),
        (two.id, 1, "busy-worker", "cancelled", "bulk", True),
    ]
    assert db.execute("select count(*) from x_job_leases").fetchone() == (0,)
    late = Settlement(one.id, token, JobState.DONE, output_json="1")
    assert leases_db.job_settle(db, [late], None) == set()  # fenced: the cancel ended the attempt
    assert db.execute("select count(*) from x_job_attempts").fetchone() == (2,)
