"""Durable steps in-process with a frozen clock: persisted before return, replayed not re-run,
suspensions that give the slot back, events that are not missed and are consumed once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from apps import step_jobs
from ujobs_bridge import FrozenClock, StepError, Worker, WorkerConfig, send_event
from ujobs_bridge._internal.config.loading import from_module
from ujobs_bridge.client import Client


@pytest.fixture(autouse=True)
def _reset() -> None:
    step_jobs.CALLS.clear()
    step_jobs.FAIL_AFTER_FIRST_STEP.clear()


@pytest.fixture
def worker(dsn: str, clock: FrozenClock) -> Iterator[Worker]:
    w = Worker(dsn, from_module(step_jobs), WorkerConfig(queues=("steps",)), clock=clock)
    yield w
    w.stop(timeout_s=2)


def job_row(db: psycopg.Connection[Any], job_id: Any) -> dict[str, Any]:
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    row = cur.execute(
        "select state, attempt, output, last_error, run_at, lease_token from x_jobs where id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row


def steps_of(db: psycopg.Connection[Any], job_id: Any) -> list[tuple[Any, ...]]:
    return db.execute(
        "select name, status, output from x_job_steps where run_id = %s order by ordinal", (job_id,)
    ).fetchall()


def test_a_completed_step_is_replayed_not_run_again(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    step_jobs.FAIL_AFTER_FIRST_STEP.add("k")
    ref = step_jobs.two_steps.configure(client=frozen_client).enqueue("k")
    worker.tick()
    assert job_row(db, ref.id)["state"] == "ready"
    assert steps_of(db, ref.id) == [("first", "completed", "k:first-result-1")]
    worker.tick()
    r = job_row(db, ref.id)
    assert (r["state"], r["attempt"], r["output"]) == (
        "done",
        2,
        ["k:first-result-1", "k:second-result-1"],
    )
    assert step_jobs.CALLS["k:first"] == 1 and step_jobs.CALLS["k:second"] == 1


def test_the_same_step_name_twice_is_refused_before_the_second_side_effect(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    ref = step_jobs.same_name_twice.configure(client=frozen_client).enqueue()
    worker.tick()
    r = job_row(db, ref.id)
    assert r["state"] == "dead" and "UJ_STEP_DUPLICATE" in r["last_error"]
    assert step_jobs.CALLS["charge"] == 1


def test_step_names_that_change_between_attempts_park_the_job(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    ref = step_jobs.drifting_names.configure(client=frozen_client).enqueue()
    worker.tick()
    worker.tick()
    r = job_row(db, ref.id)
    assert (
        r["state"] == "dead"
        and "UJ_NONDETERMINISM" in r["last_error"]
        and "fetch-1" in r["last_error"]
    )
    assert step_jobs.CALLS["fetch-1"] == 1 and step_jobs.CALLS["fetch-2"] == 0
    assert worker.tick() == 0


def test_a_step_result_that_is_not_json_names_the_step(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    ref = step_jobs.step_returns_object.configure(client=frozen_client).enqueue()
    worker.tick()
    r = job_row(db, ref.id)
    assert r["state"] == "dead" and "step 'bad'" in r["last_error"]


def test_sleep_parks_the_job_without_a_lease_until_it_is_due(
    frozen_client: Client, clock: FrozenClock, worker: Worker, db: Any
) -> None:
    ref = step_jobs.sleeper.configure(client=frozen_client).enqueue("s", 3600)
    worker.tick()
    r = job_row(db, ref.id)
    assert (r["state"], r["lease_token"], r["run_at"], r["attempt"]) == (
        "sleeping",
        None,
        clock.now() + timedelta(hours=1),
        0,
    )
    assert worker.tick() == 0
    clock.advance(timedelta(hours=1))
    worker.tick()
    r = job_row(db, ref.id)
    assert (r["state"], r["output"]) == ("done", "rested")
    assert step_jobs.CALLS["s:before"] == 1 and step_jobs.CALLS["s:after"] == 1
    assert [s[:2] for s in steps_of(db, ref.id)] == [
        ("before", "completed"),
        ("nap", "completed"),
        ("after", "completed"),
    ]


def test_more_sleeping_jobs_than_slots_all_finish(
    dsn: str, frozen_client: Client, clock: FrozenClock, db: Any
) -> None:
    narrow = Worker(
        dsn,
        from_module(step_jobs),
        WorkerConfig(queues=("steps",), concurrency=1, prefetch_multiplier=1),
        clock=clock,
    )
    try:
        refs = [
            step_jobs.sleeper.configure(client=frozen_client).enqueue(f"j{i}", 60) for i in range(5)
        ]
        for _ in range(5):
            assert narrow.tick() == 1  # each one parks and gives its only slot back
        assert {job_row(db, r.id)["state"] for r in refs} == {"sleeping"}
        clock.advance(timedelta(seconds=60))
        for _ in range(5):
            narrow.tick()
        assert {job_row(db, r.id)["state"] for r in refs} == {"done"}
    finally:
        narrow.stop(timeout_s=2)


def test_wait_for_event_suspends_until_the_event_arrives(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    ref = step_jobs.waiter.configure(client=frozen_client).enqueue("o-1")
    worker.tick()
    assert job_row(db, ref.id)["state"] == "waiting"
    assert worker.tick() == 0
    sent = send_event("order.approved", "o-1", {"by": "ann"}, client=frozen_client)
    assert sent.woken == 1
    worker.tick()
    r = job_row(db, ref.id)
    assert (r["state"], r["output"]) == ("done", {"by": "ann"})
    assert step_jobs.CALLS["o-1:before"] == 1


def test_an_event_sent_before_the_wait_is_not_missed(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    send_event("order.approved", "o-2", {"by": "bob"}, client=frozen_client)
    ref = step_jobs.waiter.configure(client=frozen_client).enqueue("o-2")
    worker.tick()
    assert job_row(db, ref.id)["output"] == {"by": "bob"}


def test_an_event_is_consumed_once(frozen_client: Client, worker: Worker, db: Any) -> None:
    first = step_jobs.waiter.configure(client=frozen_client).enqueue("o-3")
    second = step_jobs.waiter.configure(client=frozen_client).enqueue("o-3")
    worker.tick()
    send_event("order.approved", "o-3", "only one", client=frozen_client)
    worker.tick()
    states = sorted(job_row(db, r.id)["state"] for r in (first, second))
    assert states == ["done", "waiting"]
    assert db.execute(
        "select count(*) from x_job_events where consumed_by is not null"
    ).fetchone() == (1,)


def test_an_event_wait_times_out_with_a_clear_outcome(
    frozen_client: Client, clock: FrozenClock, worker: Worker, db: Any
) -> None:
    ref = step_jobs.waiter.configure(client=frozen_client).enqueue("o-4", 60)
    worker.tick()
    r = job_row(db, ref.id)
    assert r["state"] == "waiting" and r["run_at"] == clock.now() + timedelta(seconds=60)
    clock.advance(timedelta(seconds=61))
    worker.tick()
    assert job_row(db, ref.id)["output"] == "timed out"
    send_event("order.approved", "o-4", "too late", client=frozen_client)
    assert db.execute("select count(*) from x_job_events where consumed_by is null").fetchone() == (
        1,
    )


def test_async_bodies_use_steps_too(frozen_client: Client, worker: Worker, db: Any) -> None:
    ref = step_jobs.async_steps.configure(client=frozen_client).enqueue(20)
    worker.tick()
    worker.tick()
    assert job_row(db, ref.id)["output"] == 41


@pytest.mark.parametrize(
    ("kind", "state", "needle"),
    [("cancel", "cancelled", "no longer wanted"), ("discard", "dead", "UJ_JOB_DISCARDED")],
)
def test_explicit_outcomes(
    frozen_client: Client, worker: Worker, db: Any, kind: str, state: str, needle: str
) -> None:
    ref = step_jobs.outcome.configure(client=frozen_client).enqueue(kind)
    worker.tick()
    r = job_row(db, ref.id)
    assert r["state"] == state and needle in r["last_error"]
    assert step_jobs.CALLS[f"outcome:{kind}"] == 1


def test_snooze_runs_later_without_spending_an_attempt(
    frozen_client: Client, clock: FrozenClock, worker: Worker, db: Any
) -> None:
    ref = step_jobs.outcome.configure(client=frozen_client).enqueue("snooze")
    worker.tick()
    r = job_row(db, ref.id)
    assert (r["state"], r["attempt"], r["run_at"]) == (
        "ready",
        0,
        clock.now() + timedelta(seconds=30),
    )
    clock.advance(timedelta(seconds=30))
    worker.tick()
    assert job_row(db, ref.id)["output"] == "woke"


def test_a_step_after_the_stop_signal_is_refused(
    frozen_client: Client, worker: Worker, db: Any
) -> None:
    step_jobs.steps_after_cancel.configure(client=frozen_client).enqueue()
    worker.tick()
    assert step_jobs.CALLS["late"] == 0


def test_steps_outside_a_job_are_refused() -> None:
    from ujobs_bridge import step

    with pytest.raises(StepError, match="outside a running job"):
        step.run("x", lambda: 1)


def test_events_send_and_jobs_show_from_the_cli(
    dsn: str, frozen_client: Client, clock: FrozenClock, worker: Worker, db: Any
) -> None:
    import json
    import subprocess
    import sys
    from datetime import UTC, datetime

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ujobs_bridge", *args, "--dsn", dsn],
            capture_output=True,
            text=True,
            timeout=60,
        )

    ref = step_jobs.waiter.configure(client=frozen_client).enqueue("o-cli")
    worker.tick()
    shown = json.loads(cli("jobs", "show", str(ref.id), "--json").stdout)
    assert shown["suspended"] == "waiting for event 'order.approved' key 'o-cli' (no timeout)"
    assert [(s["name"], s["status"]) for s in shown["steps"]] == [
        ("before", "completed"),
        ("approval", "waiting"),
    ]
    table = cli("jobs", "show", str(ref.id))
    assert "2 step(s)" in table.stdout and "approval" in table.stdout
    sent = cli("events", "send", "order.approved", "o-cli", "--payload", '{"by": "cli"}')
    assert sent.returncode == 0 and "woke 1 waiting job(s)" in sent.stdout
    clock.set(datetime.now(UTC) + timedelta(seconds=1))  # the CLI used the database clock
    worker.tick()
    assert job_row(db, ref.id)["output"] == {"by": "cli"}
    bad = cli("events", "send", "order.approved", "o-cli", "--payload", "{not json")
    assert bad.returncode == 2 and "not JSON" in bad.stderr
