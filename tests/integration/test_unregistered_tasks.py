"""A job whose name no worker declares is never silent and never lost: the worker consuming its
queue logs it as an error in Celery's words (rate-limited), never claims it, dead-letters it only
when asked to, and `jobs stats` lists it as waiting."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from apps import basic_jobs
from ujobs_bridge import FrozenClock, Worker, WorkerConfig
from ujobs_bridge._internal.config.loading import from_module
from ujobs_bridge._internal.db.enqueue import EnqueueSpec
from ujobs_bridge.client import Client
from ujobs_bridge.errors import ConfigError

UNKNOWN = "proj.tasks.not_here"


def enqueue_unknown(
    client: Client, *, queue: str = "basic", run_at: datetime | None = None
) -> uuid.UUID:
    spec = EnqueueSpec(
        id=uuid.uuid4(),
        name=UNKNOWN,
        queue=queue,
        input_json='{"args": [], "kwargs": {}}',
        max_attempts=3,
        run_at=run_at,
    )
    return client.enqueue_spec(spec).id


@pytest.fixture
def make_worker(dsn: str, clock: FrozenClock) -> Iterator[Any]:
    made: list[Worker] = []

    def make(**config: Any) -> Worker:
        worker = Worker(
            dsn,
            from_module(basic_jobs),
            WorkerConfig(**{"queues": ("basic",), **config}),
            clock=clock,
        )
        made.append(worker)
        return worker

    yield make
    for w in made:
        w.stop(timeout_s=2)


def unregistered_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ujobs.worker"
        and r.levelno == logging.ERROR
        and "unregistered" in r.getMessage()
    ]


def states(db: psycopg.Connection[Any], name: str) -> list[tuple[str, int]]:
    return [
        (r[0], r[1])
        for r in db.execute(
            "select state, attempt from x_jobs where name = %s order by id", (name,)
        )
    ]


def test_the_worker_logs_an_unregistered_name_once_and_never_claims_it(
    frozen_client: Client,
    clock: FrozenClock,
    make_worker: Any,
    db: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="ujobs.worker")
    for _ in range(3):
        enqueue_unknown(frozen_client)
    basic_jobs.add.configure(client=frozen_client).enqueue(1, 2)
    worker = make_worker(unregistered_after_s=60)
    assert worker.tick() == 1  # the known job runs; the unknown ones are not claimed
    assert unregistered_lines(caplog) == []  # due for less than a minute: maybe another worker's
    clock.advance(timedelta(seconds=150))
    assert worker.tick() == 0
    assert unregistered_lines(caplog) == [
        f"Received unregistered task of type '{UNKNOWN}' on queue 'basic': 3 waiting, oldest 2m; "
        "deploy a worker that declares it, or `ujobs-bridge jobs cancel` them [UJ_TASK_UNREGISTERED]"
    ]
    clock.advance(timedelta(seconds=30))
    assert worker.tick() == 0  # another sweep inside the rate-limit window: no second line
    assert len(unregistered_lines(caplog)) == 1
    assert states(db, UNKNOWN) == [("ready", 0)] * 3  # waiting for a worker that declares it


def test_the_line_comes_back_once_the_window_has_passed(
    frozen_client: Client, clock: FrozenClock, make_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="ujobs.worker")
    enqueue_unknown(frozen_client)
    clock.advance(timedelta(hours=3))
    worker = make_worker(unregistered_after_s=0, unregistered_log_every_s=1e-6)
    worker.tick()
    worker.tick()
    lines = unregistered_lines(caplog)
    assert len(lines) == 2 and all("1 waiting, oldest 3h" in line for line in lines)


def test_a_worker_on_other_queues_says_nothing(
    frozen_client: Client, clock: FrozenClock, make_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="ujobs.worker")
    enqueue_unknown(frozen_client, queue="elsewhere")
    clock.advance(timedelta(minutes=10))
    make_worker().tick()
    assert unregistered_lines(caplog) == []


def test_dead_lettering_is_opt_in_and_waits_its_time(
    frozen_client: Client,
    clock: FrozenClock,
    make_worker: Any,
    db: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="ujobs.worker")
    job_id = enqueue_unknown(frozen_client)
    clock.advance(timedelta(minutes=4))
    make_worker().tick()  # default: never dead-lettered
    worker = make_worker(unregistered_dead_after_s=300)
    worker.tick()
    assert states(db, UNKNOWN) == [("ready", 0)]
    clock.advance(timedelta(minutes=1, seconds=1))
    worker.tick()
    state, error = db.execute(
        "select state, last_error from x_jobs where id = %s", (job_id,)
    ).fetchone()
    assert state == "dead"
    assert error.startswith("UJ_TASK_UNREGISTERED: ") and f"'{UNKNOWN}'" in error
    assert any(
        "Dead-lettered 1 job(s) of unregistered task" in m for m in unregistered_lines(caplog)
    )


def test_the_thresholds_are_refused_when_not_durations() -> None:
    with pytest.raises(ConfigError, match="unregistered_after_s"):
        WorkerConfig(unregistered_after_s=-1)
    with pytest.raises(ConfigError, match="unregistered_log_every_s"):
        WorkerConfig(unregistered_log_every_s=0)
    with pytest.raises(ConfigError, match="unregistered_dead_after_s"):
        WorkerConfig(unregistered_dead_after_s=float("nan"))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args], capture_output=True, text=True, timeout=60
    )


def test_jobs_stats_lists_names_waiting_longer_than_the_threshold(dsn: str, client: Client) -> None:
    enqueue_unknown(client, run_at=datetime.now(UTC) - timedelta(minutes=5))
    enqueue_unknown(client, run_at=datetime.now(UTC) - timedelta(minutes=5))
    enqueue_unknown(client, queue="other")  # due just now: not stranded yet
    done = cli("jobs", "stats", "--dsn", dsn, "--json")
    assert done.returncode == 0, done.stderr
    rows = {(r["queue"], r["state"]): r for r in json.loads(done.stdout)}
    assert rows[("basic", "ready")]["jobs"] == 2
    assert rows[("basic", "ready")]["stranded_after_s"] == 60
    [stranded] = rows[("basic", "ready")]["stranded"]
    assert (stranded["name"], stranded["jobs"]) == (UNKNOWN, 2)
    assert 290 < stranded["oldest_due_s"] < 400
    assert rows[("other", "ready")]["stranded"] == []
    shown = cli("jobs", "stats", "--dsn", dsn, "--stranded-after", "0")
    assert shown.returncode == 0, shown.stderr
    assert "due for at least 0s and not claimed" in shown.stdout
    assert shown.stdout.count(UNKNOWN) == 2  # both queues
    assert "Deploy a worker that declares it" in shown.stdout
    refused = cli("jobs", "stats", "--dsn", dsn, "--stranded-after", "-1")
    assert refused.returncode == 2 and "--stranded-after" in refused.stderr
