"""``ujobs-bridge demo`` as a new user runs it: a subprocess against a real database, checked
against the rows it left behind (not against what it printed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

import psycopg

from apps.celery_harness import body_of
from ujobs_bridge._internal.cli import demo_jobs


def test_demo_finishes_with_one_dead_letter_and_retried_jobs_done(pg_dsn: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "demo", "--jobs", "300", "--dsn", pg_dsn, "--json"],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "database:" in result.stderr and "(--dsn)" in result.stderr
    printed = json.loads(result.stdout)
    queue = printed["queue"]
    assert queue.startswith("demo-")

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select id, name, state, attempt, max_attempts, last_error from x_jobs where queue = %s",
            (queue,),
        ).fetchall()
    assert len(rows) == 300
    states = Counter(r[2] for r in rows)
    assert states == {"done": 299, "dead": 1}
    dead = next(r for r in rows if r[2] == "dead")
    assert dead[1] == demo_jobs.charge_card.name
    assert dead[3] == dead[4] == demo_jobs.charge_card.retry.max_attempts
    assert "CardDeclined" in dead[5]
    done = [r for r in rows if r[2] == "done"]
    assert all(r[1] == demo_jobs.process_order.name for r in done)
    assert any(r[3] > 1 for r in done), "some jobs should have needed a retry"

    # The printed summary is the database's: the same counts and the same dead letter.
    assert printed["states"] == {"dead": 1, "done": 299}
    assert printed["dead_letters"][0]["id"] == str(dead[0])
    assert printed["retries"]["observed"] == sum(r[3] - 1 for r in rows)
    assert printed["retries"]["observed"] == printed["retries"]["planned"]


def test_demo_refuses_bad_flags_with_usage_errors(pg_dsn: str) -> None:
    for args in (["--jobs", "1"], ["--jobs", "0"], ["--timeout", "nan"], ["-c", "0"]):
        result = subprocess.run(
            [sys.executable, "-m", "ujobs_bridge", "demo", "--dsn", pg_dsn, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, (args, result.stderr)
        assert "hint:" in result.stderr


def test_demo_runs_the_celery_style_app_through_the_bridge(pg_dsn: str) -> None:
    """The Celery part: chain, group, a task that retries once, a beat entry; the printed results
    are Celery's own (AsyncResult.get) and the rows behind them are in x_jobs."""
    result = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "demo", "--jobs", "20", "--dsn", pg_dsn, "--json"],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    printed = json.loads(result.stdout)["celery"]
    assert printed["error"] is None
    assert printed["chain"] == (2 + 3) * 10 + 7
    assert printed["group"] == [0, 1, 4, 9, 16]
    assert printed["retry"]["result"] == {"url": "https://example.com/feed.xml", "retries": 1}
    assert [(r["retries"], r["celery_state"]) for r in printed["retry"]["rows"]] == [
        (0, "RETRY"),
        (1, "SUCCESS"),
    ]
    assert printed["beat"]["fired"] >= 1
    occurrence = printed["beat"]["result"]["occurrence"]
    assert datetime.fromisoformat(occurrence).tzinfo is not None

    queue = printed["queue"]
    assert queue == json.loads(result.stdout)["queue"] + "-celery"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select name, state, input -> 'headers' ->> 'ujobs_occurrence' from x_jobs"
            " where queue = %s",
            (queue,),
        ).fetchall()
    names = Counter(r[0] for r in rows)
    assert names["demo.add"] == 2 and names["demo.mul"] == 1  # the chain's three links
    assert names["demo.square"] == 5 and names["demo.flaky_fetch"] == 2
    assert names["demo.heartbeat"] >= 1
    assert {r[1] for r in rows} == {"done"}
    assert occurrence in {r[2] for r in rows if r[0] == "demo.heartbeat"}
    assert printed["states"] == {"done": len(rows)}


def test_demo_without_the_celery_part_prints_no_celery_results(pg_dsn: str) -> None:
    args = ["demo", "--jobs", "5", "--no-celery", "--dsn", pg_dsn, "--json"]
    result = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "celery" not in json.loads(result.stdout)


def test_demo_drains_a_backlog_real_celery_published_to_a_filesystem_broker_and_runs_it(
    pg_dsn: str, tmp_path: Path
) -> None:
    """The migrate part: plain Celery publishes 101 messages to kombu's filesystem transport;
    the drain makes 100 rows and quarantines the one whose task the app no longer has; the
    bridge runs the 100 with the right results. kombu's folders live in a temporary directory:
    nothing is left in the working directory."""
    result = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "demo", "--jobs", "5", "--dsn", pg_dsn, "--json"],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    printed = doc["migrate"]
    assert printed["error"] is None
    assert (printed["published"], printed["drained"], printed["quarantined"], printed["ran"]) == (
        101,
        100,
        1,
        100,
    )
    assert printed["quarantined_by_reason"] == {"unknown_task": 1}
    assert printed["results_ok"] == 100
    assert printed["left_in_broker"] == 0
    assert printed["queue"] == doc["queue"] + "-migrate"

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select name, state, input from x_jobs where queue = %s", (printed["queue"],)
        ).fetchall()
        kept = conn.execute(
            "select task, reason from x_migrate_quarantine where queue = %s", (printed["queue"],)
        ).fetchall()
    assert Counter((r[0], r[1]) for r in rows) == {
        ("demo.add", "done"): 60,
        ("demo.square", "done"): 40,
    }
    assert sorted(body_of({"input": r[2]})["args"] for r in rows if r[0] == "demo.add") == sorted(
        [i, i] for i in range(60)
    )
    assert kept == [("legacy.cleanup", "unknown_task")]
    assert printed["states"] == {"done": 100}
    assert list(tmp_path.iterdir()) == []


def test_demo_prints_the_migrate_table(pg_dsn: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "demo", "--jobs", "2", "--dsn", pg_dsn],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table = result.stdout[result.stdout.index("a Celery backlog moved onto the bridge") :]
    shown = dict(re.findall(r"│ (published|drained|quarantined|ran)\s*│\s*([\d,]+) │", table))
    assert shown == {"published": "101", "drained": "100", "quarantined": "1", "ran": "100"}
    assert "legacy.cleanup" in table
