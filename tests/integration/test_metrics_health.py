"""Prometheus series and health checks match what happened: a real worker's /metrics counts a
run with known outcomes, the database series show depth before and after, and ``health``'s exit
code follows the database, the schema and the backlog's age."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_proc import TESTS_DIR, CliProc
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conftest import wait_for
from ujobs_bridge import Worker, WorkerConfig
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.observe.metrics_db import DatabaseCollector
from ujobs_bridge.client import Client
from ujobs_bridge.testing import run_until_idle


@pytest.fixture
def procs() -> Iterator[list[CliProc]]:
    started: list[CliProc] = []
    yield started
    for proc in started:
        proc.close()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], series: str, /, **labels: str
) -> float:
    return found.get((series, tuple(sorted(labels.items()))), 0.0)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_workers_metrics_count_a_run_with_known_outcomes(
    dsn: str, client: Client, tmp_path: Path, procs: list[CliProc]
) -> None:
    from apps.basic_jobs import add, always_fails

    for i in range(3):
        add.configure(client=client).enqueue(i, 1)
    always_fails.configure(client=client).enqueue()
    proc = CliProc(
        ["worker", "-A", "apps.basic_jobs", "--poll", "0.2", "--metrics-port", "0", "--dsn", dsn],
        tmp_path / "worker.log",
    )
    procs.append(proc)
    match = wait_for(
        lambda: re.search(r"metrics: (http://\S+)/metrics", proc.output()),
        timeout=60,
        what="the metrics endpoint",
    )
    base = match.group(1)  # type: ignore[union-attr]
    dead = (
        "ujobs_jobs_finished_total",
        (("name", always_fails.name), ("outcome", "dead"), ("queue", "basic")),
    )
    found = wait_for(
        lambda: (s := samples(get(base + "/metrics")[1])).get(dead) and s,
        timeout=60,
        what="the dead letter counted",
    )
    assert (
        value(found, "ujobs_jobs_finished_total", name=add.name, queue="basic", outcome="done") == 3
    )
    assert (
        value(
            found,
            "ujobs_jobs_finished_total",
            name=always_fails.name,
            queue="basic",
            outcome="retried",
        )
        == 1
    )
    assert (
        value(
            found,
            "ujobs_jobs_finished_total",
            name=always_fails.name,
            queue="basic",
            outcome="dead",
        )
        == 1
    )
    assert value(found, "ujobs_attempt_duration_seconds_count", name=add.name, queue="basic") == 3
    assert (
        value(found, "ujobs_attempt_duration_seconds_count", name=always_fails.name, queue="basic")
        == 2
    )
    assert value(found, "ujobs_pickup_latency_seconds_count", queue="basic") == 5
    assert value(found, "ujobs_lease_rescues_total") == 0
    assert get(base + "/healthz")[0] == 200
    status, body = get(base + "/readyz")
    assert status == 200 and json.loads(body)["ok"] is True
    assert get(base + "/nothing")[0] == 404
    proc.term()
    assert proc.wait(timeout=30) == 0, proc.output()


def test_database_series_show_depth_before_and_after_a_run(dsn: str, client: Client) -> None:
    from apps.basic_jobs import add, always_fails

    registry = CollectorRegistry()
    registry.register(DatabaseCollector(dsn))
    old = datetime.now(UTC) - timedelta(minutes=5)
    add.configure(client=client, run_at=old).enqueue(1, 2)
    add.configure(client=client).enqueue(1, 2)
    add.configure(client=client, delay=3600).enqueue(1, 2)
    always_fails.configure(client=client).enqueue()
    before = samples(generate_latest(registry).decode())
    assert value(before, "ujobs_database_up") == 1
    assert value(before, "ujobs_queue_jobs", queue="basic", state="ready") == 3
    assert value(before, "ujobs_queue_jobs", queue="basic", state="scheduled") == 1
    assert value(before, "ujobs_queue_jobs", queue="basic", state="dead") == 0
    assert value(before, "ujobs_queue_oldest_ready_age_seconds", queue="basic") >= 290
    assert value(before, "ujobs_outbox_pending") == 0
    jobs = loading.load("apps.basic_jobs")
    worker = Worker(
        dsn, {k: jobs[k] for k in (add.name, always_fails.name)}, WorkerConfig(queues=("basic",))
    )
    run_until_idle(worker)
    after = samples(generate_latest(registry).decode())
    assert value(after, "ujobs_queue_jobs", queue="basic", state="ready") == 0
    assert value(after, "ujobs_queue_jobs", queue="basic", state="scheduled") == 1
    assert value(after, "ujobs_queue_jobs", queue="basic", state="dead") == 1
    assert value(after, "ujobs_queue_oldest_ready_age_seconds", queue="basic") == 0
    assert ("ujobs_migrate_quarantine_open", ()) not in after  # a family with no entries


def test_an_unreachable_database_is_a_series_not_a_failed_scrape() -> None:
    registry = CollectorRegistry()
    registry.register(DatabaseCollector("postgresql://postgres@127.0.0.1:1/none?connect_timeout=2"))
    found = samples(generate_latest(registry).decode())
    assert value(found, "ujobs_database_up") == 0


def health(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR))
    env.pop("UJOBS_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "health", *args, "--dsn", dsn],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_health_exit_code_follows_the_database_and_the_backlog_age(
    dsn: str, client: Client
) -> None:
    from apps.basic_jobs import add

    ok = health(dsn, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] is True
    assert {c["name"] for c in report["checks"]} == {"database", "schema"}
    add.configure(client=client, run_at=datetime.now(UTC) - timedelta(minutes=10)).enqueue(1, 1)
    late = health(dsn, "--max-age", "60")
    assert late.returncode == 1, late.stdout
    assert "FAIL backlog:basic: oldest ready job waited" in late.stdout
    gone = health("postgresql://postgres@127.0.0.1:1/none?connect_timeout=2")
    assert gone.returncode == 1 and "FAIL database: unreachable" in gone.stdout


def test_health_fails_without_a_live_worker_on_a_queue_and_passes_with_one(
    dsn: str, tmp_path: Path, procs: list[CliProc]
) -> None:
    none = health(dsn, "--queue", "basic")
    assert none.returncode == 1, none.stdout
    assert "FAIL workers:basic: 0 live worker(s)" in none.stdout
    proc = CliProc(
        ["worker", "-A", "apps.basic_jobs", "--poll", "0.2", "--dsn", dsn], tmp_path / "w.log"
    )
    procs.append(proc)
    wait_for(lambda: " ready: " in proc.output(), timeout=60, what="the worker to be ready")
    served = health(dsn, "--queue", "basic", "--json")
    assert served.returncode == 0, served.stdout
    (check,) = [c for c in json.loads(served.stdout)["checks"] if c["name"] == "workers:basic"]
    assert check == {
        "name": "workers:basic",
        "ok": True,
        "detail": "1 live worker(s)",
        "skipped": False,
    }
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(dsn))
    assert (
        value(samples(generate_latest(registry).decode()), "ujobs_live_workers", queue="basic") == 1
    )
    proc.term()
    assert proc.wait(timeout=30) == 0, proc.output()
    assert health(dsn, "--queue", "basic").returncode == 1  # a clean exit removes its node
