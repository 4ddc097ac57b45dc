"""Durable steps under real faults: workers killed and paused for real (reliability.md F1, F2,
F2b, F5) and an event consume that committed while the worker saw an error (F15). The effect
ledger (``test_effects``) counts how often a side effect really ran."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from worker_proc import WorkerProc

from apps import step_fault_jobs
from conftest import start_recorded, wait_for
from ujobs_bridge import send_event
from ujobs_bridge.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
APP = "apps.step_fault_jobs"
QUEUE = "stepfaults"


@pytest.fixture
def ledger(dsn: str, db: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    db.execute(
        "create table if not exists test_effects (key text, job_id uuid, attempt int, pid int, phase text)"
    )
    db.execute("create table if not exists test_gates (name text primary key)")
    db.execute("truncate test_effects, test_gates")
    yield db


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(faults_spec: str = "", extra: list[str] | None = None) -> WorkerProc:
        proc = WorkerProc(
            dsn,
            APP,
            QUEUE,
            tmp_path / f"worker{len(started)}.log",
            faults=faults_spec,
            extra=extra,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- worker {proc.pid} ---\n{proc.output()[-3000:]}")


def effects(db: psycopg.Connection[Any], phase: str) -> list[tuple[Any, ...]]:
    return db.execute(
        "select attempt, pid from test_effects where phase = %s order by attempt", (phase,)
    ).fetchall()


def job_state(db: psycopg.Connection[Any], job_id: Any) -> tuple[Any, ...]:
    row = db.execute(
        "select state, attempt, output, last_error from x_jobs where id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


def open_gate(db: psycopg.Connection[Any], name: str) -> None:
    db.execute("insert into test_gates (name) values (%s) on conflict do nothing", (name,))


def test_killed_inside_a_step_before_persisting_runs_the_step_again_and_completes_once(
    client: Client, ledger: Any, workers: Any
) -> None:
    ref = step_fault_jobs.checkout.configure(client=client).enqueue("f1", gate_in_step="g1")
    first = workers()
    wait_for(lambda: effects(ledger, "charge"), what="the step to start")
    wait_for(lambda: start_recorded(ledger, ref.id), what="the body's start to be recorded")
    first.kill()
    open_gate(ledger, "g1")
    workers()
    wait_for(
        lambda: job_state(ledger, ref.id)[0] == "done", timeout=30, what="the rescued job to finish"
    )
    _state, attempt, _output, last_error = job_state(ledger, ref.id)
    assert attempt == 2 and "UJ_WORKER_LOST" in (last_error or "")
    assert len(effects(ledger, "charge")) == 2  # not persisted: at-least-once ran it again
    assert len(effects(ledger, "end")) == 1


def test_killed_after_persisting_a_step_replays_the_stored_value(
    client: Client, ledger: Any, workers: Any
) -> None:
    ref = step_fault_jobs.checkout.configure(client=client).enqueue("f2")
    first = workers("step.after_persist=kill@1")
    wait_for(
        lambda: first.proc.poll() is not None,
        timeout=20,
        what="the worker to die after the persist",
    )
    stored = ledger.execute(
        "select output from x_job_steps where run_id = %s and name = 'charge'", (ref.id,)
    ).fetchone()
    assert stored is not None and stored[0]["pid"] == first.pid
    workers()
    wait_for(
        lambda: job_state(ledger, ref.id)[0] == "done", timeout=30, what="the rescued job to finish"
    )
    output = job_state(ledger, ref.id)[2]
    assert output["charge"] == stored[0]  # replayed, equal to what was persisted
    assert len(effects(ledger, "charge")) == 1
    assert output["finished_by"] != first.pid


def test_a_commit_the_client_saw_fail_is_neither_rerun_nor_duplicated(
    client: Client, ledger: Any, workers: Any
) -> None:
    ref = step_fault_jobs.checkout.configure(client=client).enqueue("f2b")
    workers("step.after_persist=exec_then_raise@1")
    wait_for(lambda: job_state(ledger, ref.id)[0] == "done", timeout=30, what="the job to finish")
    _state, attempt, _output, _last_error = job_state(ledger, ref.id)
    # The error is the infrastructure's: the step write is retried within the attempt, finds the
    # row its first commit wrote, and goes on; no attempt charged.
    assert attempt == 1
    assert ledger.execute(
        "select count(*) from x_job_steps where run_id = %s and name = 'charge'", (ref.id,)
    ).fetchone() == (1,)
    assert len(effects(ledger, "charge")) == 1


def test_a_paused_worker_whose_lease_was_taken_over_writes_nothing_late(
    client: Client, ledger: Any, workers: Any
) -> None:
    ref = step_fault_jobs.checkout.configure(client=client).enqueue("f5", gate_after="g5")
    paused = workers()
    wait_for(lambda: effects(ledger, "charge"), what="the first step to persist")
    wait_for(
        lambda: ledger.execute(
            "select 1 from x_job_steps where run_id = %s and name = 'charge'", (ref.id,)
        ).fetchone(),
        what="the charge step row",
    )
    paused.pause()
    wait_for(
        lambda: (
            ledger.execute(
                "select lease_expires_at < now() from x_jobs where id = %s", (ref.id,)
            ).fetchone()
            == (True,)
        ),
        timeout=20,
        what="the paused worker's lease to run out",
    )
    taker = workers()
    open_gate(ledger, "g5")
    wait_for(
        lambda: job_state(ledger, ref.id)[0] == "done",
        timeout=30,
        what="the second worker to finish the job",
    )
    paused.resume()
    wait_for(
        lambda: "UJ_LEASE_LOST" in paused.output() or "fenced" in paused.output(),
        timeout=20,
        what="the paused worker to be fenced",
    )
    _state, attempt, output, _ = job_state(ledger, ref.id)
    assert output["finished_by"] == taker.pid and output["ship"]["pid"] == taker.pid
    ship = ledger.execute(
        "select output, job_attempt from x_job_steps where run_id = %s and name = 'ship'", (ref.id,)
    ).fetchone()
    assert ship == (output["ship"], attempt)
    assert [pid for _, pid in effects(ledger, "end")] == [taker.pid]
    assert len(effects(ledger, "charge")) == 1


def returned_steps(db: psycopg.Connection[Any]) -> list[tuple[Any, str, str]]:
    """(job id, step name, value) of each ``step.run`` of ``many_steps`` that returned."""
    rows = db.execute(
        "select job_id, phase from test_effects where phase like 'returned:%%'"
    ).fetchall()
    return [(job_id, *phase.split(":", 2)[1:]) for job_id, phase in rows]


def test_every_step_returned_by_many_concurrent_bodies_survives_a_kill_and_is_replayed(
    client: Client, ledger: Any, workers: Any
) -> None:
    """Group commit: the steps of 8 bodies running at once share commits, and each step.run
    returns only once its own row is durable. SIGKILL the worker mid-run: every step a body saw
    return is in x_job_steps with the value the body got, and the next worker replays it (its
    side effect never runs again)."""
    call = step_fault_jobs.many_steps.configure(client=client)
    refs = [call.enqueue(f"m{i}", 30) for i in range(8)]
    first = workers(extra=["-c", "8"])
    wait_for(lambda: len(returned_steps(ledger)) >= 60, timeout=60, what="60 steps to return")
    first.kill()
    returned = returned_steps(ledger)
    stored = {
        (run_id, name): (output, completed_at)
        for run_id, name, output, completed_at in ledger.execute(
            "select run_id, name, output, completed_at from x_job_steps where status = 'completed'"
        ).fetchall()
    }
    for job_id, name, value in returned:
        got = stored.get((job_id, name), (None, None))[0]
        assert got == value, f"{name} of {job_id} returned {value} but {got} is stored"
    # the bodies ran at once and their steps shared commits: rows of different jobs written by
    # one statement carry the same transaction time
    jobs_per_commit: dict[Any, set[Any]] = {}
    for (run_id, _name), (_output, completed_at) in stored.items():
        jobs_per_commit.setdefault(completed_at, set()).add(run_id)
    assert max(len(jobs) for jobs in jobs_per_commit.values()) > 1

    workers(extra=["-c", "8"])
    wait_for(
        lambda: all(job_state(ledger, ref.id)[0] == "done" for ref in refs),
        timeout=60,
        what="the rescued jobs to finish",
    )
    ran = ledger.execute(
        "select job_id, phase, count(*) from test_effects where phase like 'ran:%%' "
        "group by job_id, phase"
    ).fetchall()
    runs = {(job_id, phase.removeprefix("ran:")): n for job_id, phase, n in ran}
    for job_id, name, value in returned:
        assert runs[(job_id, name)] == 1, f"{name} of {job_id} ran again after it returned"
        output = job_state(ledger, job_id)[2]
        assert output[int(name.removeprefix("s"))] == value  # replayed: the value it returned


def consumed(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "select id, payload, consumed_by, consumed_step from x_job_events order by id"
    ).fetchall()


def send_two(dsn: str, key: str) -> None:
    """Both events in ONE transaction, so both exist before any consume can happen."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        send_event("payment.received", key, {"n": 1}, conn=conn)
        send_event("payment.received", key, {"n": 2}, conn=conn)


@pytest.mark.parametrize("sent", ["while_waiting", "before_the_wait"])
def test_an_ambiguous_event_consume_resumes_with_the_first_event_and_leaves_the_second(
    dsn: str, client: Client, ledger: Any, workers: Any, sent: str
) -> None:
    # F15: the consume (event row + step row) commits, then the client sees an error. The retry
    # must replay the event this step already took, not consume the next one for the same key.
    key = f"f15-{sent}"
    if sent == "before_the_wait":
        send_two(dsn, key)
    ref = step_fault_jobs.await_payment.configure(client=client).enqueue(key)
    workers("event.after_consume_commit=exec_then_raise@1")
    if sent == "while_waiting":
        wait_for(
            lambda: job_state(ledger, ref.id)[0] == "waiting", what="the job to park on the event"
        )
        send_two(dsn, key)
    wait_for(
        lambda: job_state(ledger, ref.id)[0] in ("done", "dead"), timeout=30, what="the job to end"
    )
    state, attempt, output, last_error = job_state(ledger, ref.id)
    assert state == "done", last_error
    # the fault fired on the consume, an infrastructure error: retried within the attempt, which
    # finds the event its step already took; no attempt charged (the park is uncounted too)
    assert attempt == 1
    assert output["paid"] == {"n": 1}
    assert len(effects(ledger, "end")) == 1  # the body got past the wait once
    step_rows = ledger.execute(
        "select status, output from x_job_steps where run_id = %s", (ref.id,)
    ).fetchall()
    assert step_rows == [
        ("completed", {"event": "payment.received", "key": key, "payload": {"n": 1}})
    ]
    (_, first, by, step_name), (_, second, second_by, second_step) = consumed(ledger)
    assert (first, by, step_name) == ({"n": 1}, ref.id, "paid")
    # the second event is still open for a later waiter
    assert (second, second_by, second_step) == ({"n": 2}, None, None)
