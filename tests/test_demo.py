"""``ujobs-bridge demo`` as a new user runs it: a subprocess against a real database, checked
against the rows it left behind (not against what it printed)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import psycopg

from ujobs_bridge import demo_jobs


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
