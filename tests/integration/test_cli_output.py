"""The CLI as an operator meets it in the first hour: output into a pipe keeps one row per line
and whole values, job data is printed as text (never Rich markup), a Celery task id finds its
job, ``--name`` takes globs, bulk cancel/requeue ask and count, pages page, ``stats --json``
speaks ISO 8601, and the embedded server can be asked about."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from cli_proc import TESTS_DIR

from apps.celery_harness import bound
from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge.client import Client
from ujobs_bridge.testing import run_until_idle


@job(queue="cli-out", max_attempts=1)
def marked(value: Any) -> None:
    raise ValueError(f"[bold]boom[/bold] {value}")


@job(queue="cli-out")
def billing_charge(n: int) -> int:
    return n


def run(dsn: str, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """``ujobs-bridge ARGS | cat``: stdout is a pipe, as in a script."""
    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR), COLUMNS="")
    env.pop("UJOBS_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args, "--dsn", dsn],
        capture_output=True, text=True, env=env, cwd=TESTS_DIR, input=input_text, timeout=60,
    )  # fmt: skip


def test_jobs_ls_into_a_pipe_keeps_one_row_per_line_with_whole_uuids(
    dsn: str, client: Client
) -> None:
    long_name = billing_charge.with_options(name="billing.charge." + "x" * 90)
    refs = [long_name.configure(client=client).enqueue(i) for i in range(5)]
    out = run(dsn, "jobs", "ls")
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "billing.charge." in line]
    assert len(rows) == 5, out.stdout
    for ref in refs:
        assert sum(str(ref.id) in row for row in rows) == 1, out.stdout
    assert all("x" * 90 in row for row in rows)


def test_job_data_is_printed_as_text_never_as_markup(dsn: str, client: Client) -> None:
    value = {"a": "[bold]x[/bold]", "b": "[link=https://evil.example]y[/link]", "t": [None, None]}
    ref = marked.configure(client=client).enqueue(value)
    worker = Worker(dsn, {marked.name: marked}, WorkerConfig(queues=("cli-out",)))
    run_until_idle(worker)
    show = run(dsn, "jobs", "show", str(ref.id), "--show-input")
    assert show.returncode == 0, show.stderr
    assert "[bold]x[/bold]" in show.stdout
    assert "[link=https://evil.example]y[/link]" in show.stdout
    assert '"t": [null, null]' in show.stdout
    assert "\x1b]8;" not in show.stdout  # no terminal hyperlink escape
    dead = run(dsn, "jobs", "dead")
    assert "ValueError: [bold]boom[/bold]" in dead.stdout, dead.stdout


def test_jobs_show_finds_a_job_by_its_celery_task_id(dsn: str) -> None:
    from apps.celery_tasks import add

    with bound(add.app, dsn):
        result = add.apply_async((2, 3), queue="cli-celery")
    out = run(dsn, "jobs", "show", result.id, "--json")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["name"] == add.name and shown["queue"] == "cli-celery"
    assert shown["id"] != result.id  # the job's own id, found through the task id
    listed = json.loads(run(dsn, "jobs", "ls", "--task-id", result.id, "--json").stdout)
    assert [r["id"] for r in listed] == [shown["id"]]
    missing = run(dsn, "jobs", "show", "no-such-task")
    assert missing.returncode == 1 and "UJ_JOB_NOT_FOUND" in missing.stderr


def test_name_globs_paging_and_iso_times(dsn: str, client: Client) -> None:
    plain = billing_charge.with_options(name="billing.charge")
    other = billing_charge.with_options(name="billing_refund")
    for i in range(3):
        plain.configure(client=client).enqueue(i)
    other.configure(client=client).enqueue(9)
    names = lambda *a: [r["name"] for r in json.loads(run(dsn, "jobs", "ls", "--json", *a).stdout)]  # noqa: E731
    assert sorted(names("--name", "billing.*")) == ["billing.charge"] * 3
    assert names("--name", "billing_*") == ["billing_refund"]  # `_` is literal, not LIKE's
    assert sorted(names("--name", "billing?charge")) == ["billing.charge"] * 3
    assert names("--name", "billing") == []
    page1 = json.loads(run(dsn, "jobs", "ls", "--json", "--limit", "2").stdout)
    page2 = json.loads(run(dsn, "jobs", "ls", "--json", "--limit", "2", "--offset", "2").stdout)
    assert len(page1) == 2 and len(page2) == 2
    assert not {r["id"] for r in page1} & {r["id"] for r in page2}
    stats = json.loads(run(dsn, "jobs", "stats", "--json").stdout)
    for row in stats:
        assert "T" in row["oldest_run_at"]
        datetime.fromisoformat(row["oldest_run_at"])


def test_bulk_cancel_and_requeue_ask_count_and_act(
    dsn: str, client: Client, db: psycopg.Connection[Any]
) -> None:
    a = billing_charge.with_options(name="bulk.a")
    b = billing_charge.with_options(name="other.b")
    for i in range(4):
        a.configure(client=client).enqueue(i)
    b.configure(client=client).enqueue(0)
    refused = run(dsn, "jobs", "cancel", "--name", "bulk.*", input_text="n\n")
    assert refused.returncode == 1 and "cancel 4 job(s)?" in refused.stderr
    assert _states(db) == {("bulk.a", "ready"): 4, ("other.b", "ready"): 1}
    done = run(dsn, "jobs", "cancel", "--name", "bulk.*", "--queue", "cli-out", "--yes")
    assert done.returncode == 0 and "cancelled 4 job(s)" in done.stdout, done.stderr
    assert _states(db) == {("bulk.a", "cancelled"): 4, ("other.b", "ready"): 1}
    again = json.loads(
        run(dsn, "jobs", "requeue", "--state", "cancelled", "--yes", "--json").stdout
    )
    assert again == {"action": "requeue", "matched": 4, "changed": 4}
    assert _states(db) == {("bulk.a", "ready"): 4, ("other.b", "ready"): 1}
    wrong = run(dsn, "jobs", "requeue", "--state", "ready", "--yes")
    assert wrong.returncode == 2 and "only dead, cancelled" in wrong.stderr


def _states(db: psycopg.Connection[Any]) -> dict[tuple[str, str], int]:
    rows = db.execute("select name, state, count(*) from x_jobs group by 1, 2").fetchall()
    return {(r[0], r[1]): r[2] for r in rows}


def test_embedded_status_reports_a_server_never_created(tmp_path: Path) -> None:
    env = dict(os.environ, UJOBS_HOME=str(tmp_path / "home"))
    out = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "embedded", "status", "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["running"] is False and status["initialised"] is False
    stop = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "embedded", "stop"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert stop.returncode == 0 and "was not running" in stop.stdout
