"""Real worker processes killed, paused, shut down and cancelled: what a user sees afterwards.

Why it exists: the durability promises (a job survives its worker's death, a paused worker's
late write changes nothing, SIGTERM hands work back uncounted, a cancel reaches a running body,
a job that keeps killing its worker dead-letters) only mean something against real processes
and real signals. Each test runs ``python -m ujobs_bridge worker`` subprocesses (lease 2 s) on a
queue of its own, and asserts on the job rows (``x_jobs``) and on an effect ledger
(``test_effects``) that the bodies in ``apps/fault_jobs.py`` write on their own connection.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from worker_proc import TESTS_DIR, WorkerProc

from apps import fault_jobs
from conftest import start_recorded, wait_for
from ujobs_bridge import Worker, WorkerConfig
from ujobs_bridge._internal.config.loading import from_module
from ujobs_bridge.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
APP = "apps.fault_jobs"

Db = psycopg.Connection[Any]


@pytest.fixture
def queue() -> str:
    return f"wf_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def workers(dsn: str, queue: str, tmp_path: Path) -> Iterator[Any]:
    """Start worker subprocesses on this test's queue; all are killed (process group) at the end
    and their logs printed (pytest shows them when the test fails)."""
    started: list[WorkerProc] = []

    def start(*extra: str, faults: str = "") -> WorkerProc:
        log = tmp_path / f"worker{len(started)}.log"
        proc = WorkerProc(dsn, APP, queue, log, extra=list(extra), faults=faults)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- worker {proc.pid} (exit {proc.proc.returncode}) ---\n{proc.output()[-4000:]}")


def row(db: Db, job_id: Any) -> dict[str, Any]:
    found = (
        db.cursor(row_factory=dict_row)
        .execute(
            "select state, attempt, output, last_error, lease_token, lease_expires_at,"
            " updated_at, finished_at from x_jobs where id = %s",
            (job_id,),
        )
        .fetchone()
    )
    assert found is not None
    return found


def effects(db: Db, phase: str, key: str | None = None) -> list[dict[str, Any]]:
    return (
        db.cursor(row_factory=dict_row)
        .execute(
            "select key, job_id, attempt, pid, phase, at, detail from test_effects"
            " where phase = %s and (%s::text is null or key = %s) order by at",
            (phase, key, key),
        )
        .fetchall()
    )


def open_gate(db: Db, name: str) -> None:
    """The gate row, and a NOTIFY for bodies blocked on it (``wedge_jobs.hangs``)."""
    db.execute("insert into test_gates (name) values (%s) on conflict do nothing", (name,))
    db.execute("select pg_notify('test_gates', %s)", (name,))


def lease_ran_out(db: Db, job_id: Any) -> bool:
    found = db.execute(
        "select lease_expires_at < now() from x_jobs where id = %s and state = 'running'", (job_id,)
    ).fetchone()
    return found == (True,)


def db_now(db: Db) -> Any:
    found = db.execute("select clock_timestamp()").fetchone()
    assert found is not None
    return found[0]


def test_sigkill_mid_job_is_rescued_after_its_lease_and_completes_exactly_once(
    client: Client, ledger: Db, workers: Any, queue: str
) -> None:
    ref = fault_jobs.blocking.configure(client=client, queue=queue).enqueue("k1", gate="g1")
    first = workers()
    wait_for(lambda: effects(ledger, "start"), what="the body to start")
    # a first delivery's start is recorded a few milliseconds after its body starts (with the
    # next outcome write): the kill lands once it is, so the attempt is charged
    wait_for(lambda: start_recorded(ledger, ref.id), what="the body's start to be recorded")
    first.kill()
    assert row(ledger, ref.id)["state"] == "running"  # the dead worker wrote nothing
    wait_for(lambda: lease_ran_out(ledger, ref.id), timeout=10, what="the lease to run out")
    open_gate(ledger, "g1")
    second = workers()
    wait_for(lambda: row(ledger, ref.id)["state"] == "done", timeout=30, what="the rescue")

    r = row(ledger, ref.id)
    assert r["attempt"] == 2
    assert "UJ_WORKER_LOST" in (r["last_error"] or "")
    assert r["output"] == {"key": "k1", "pid": second.pid, "attempt": 2}
    assert r["lease_token"] is None
    assert [(e["attempt"], e["pid"]) for e in effects(ledger, "start")] == [
        (1, first.pid),
        (2, second.pid),
    ]
    assert [(e["attempt"], e["pid"]) for e in effects(ledger, "end")] == [(2, second.pid)]


def test_sigkill_charges_an_attempt_only_to_the_jobs_whose_body_had_started(
    client: Client, ledger: Db, workers: Any, queue: str
) -> None:
    """A worker ``-c 4`` holds 40 one-attempt jobs (its prefetch), four of them running, when it
    is SIGKILLed: the four whose body had started are rescued dead (``UJ_WORKER_LOST``, their
    only attempt spent); the 36 it never started come back uncounted, and another worker runs
    each of them once, on its first attempt."""
    call = fault_jobs.once.configure(queue=queue)
    refs = client.enqueue_many([call.call(f"k{i:02d}", gate="later") for i in range(40)])
    ids = [ref.id for ref in refs]
    first = workers("-c", "4")
    wait_for(lambda: len(effects(ledger, "start")) == 4, what="four bodies to start")
    wait_for(
        lambda: (
            ledger.execute(
                "select count(*) from x_jobs where id = any(%s) and state = 'running'", (ids,)
            ).fetchone()
            == (40,)
        ),
        what="all 40 jobs claimed",
    )
    first.kill()
    started = {e["job_id"] for e in effects(ledger, "start")}
    wait_for(
        lambda: all(lease_ran_out(ledger, i) for i in ids), timeout=15, what="the leases to run out"
    )
    open_gate(ledger, "later")
    second = workers("-c", "4")
    wait_for(
        lambda: (
            ledger.execute(
                "select count(*) from x_jobs where id = any(%s) and state in ('done', 'dead')",
                (ids,),
            ).fetchone()
            == (40,)
        ),
        timeout=60,
        what="every job to end",
    )
    for job_id in ids:
        r = row(ledger, job_id)
        if job_id in started:
            assert (r["state"], r["attempt"]) == ("dead", 1), r
            assert "UJ_WORKER_LOST" in (r["last_error"] or "")
        else:
            assert (r["state"], r["attempt"]) == ("done", 1), r
            assert r["output"]["pid"] == second.pid
    runs = [(e["job_id"], e["pid"]) for e in effects(ledger, "start")]
    assert len(runs) == 40 and len({j for j, _ in runs}) == 40  # each body started once
    assert {j for j, pid in runs if pid == first.pid} == started


def test_a_worker_killed_between_its_claim_and_the_bodys_start_is_charged_nothing(
    client: Client, ledger: Db, workers: Any, queue: str
) -> None:
    """A one-attempt job claimed for a free slot, its worker SIGKILLed right after the claim
    committed and before the body started: the job comes back uncounted and another worker runs
    it once, on its only attempt (the claim itself records no start)."""
    ref = fault_jobs.once.configure(client=client, queue=queue).enqueue("k1", gate="open")
    open_gate(ledger, "open")
    first = workers("-c", "1", faults="worker.after_claim=kill")
    wait_for(lambda: first.proc.poll() is not None, timeout=30, what="the kill after the claim")
    assert row(ledger, ref.id)["state"] == "running" and not effects(ledger, "start")
    second = workers("-c", "1")
    wait_for(
        lambda: row(ledger, ref.id)["state"] in ("done", "dead"), timeout=30, what="the rescue"
    )
    r = row(ledger, ref.id)
    assert (r["state"], r["attempt"]) == ("done", 1), r
    assert [e["pid"] for e in effects(ledger, "start")] == [second.pid]


def test_a_worker_paused_past_its_lease_cannot_overwrite_the_rescuers_result(
    client: Client, ledger: Db, workers: Any, queue: str
) -> None:
    ref = fault_jobs.blocking.configure(client=client, queue=queue).enqueue(
        "k2", gate="g2", first_attempt_only=True
    )
    paused = workers()
    wait_for(lambda: effects(ledger, "start"), what="the body to start")
    wait_for(lambda: start_recorded(ledger, ref.id), what="the body's start to be recorded")
    paused.pause()  # its attempt is charged: the rescuer's is the second, which does not block
    wait_for(lambda: lease_ran_out(ledger, ref.id), timeout=15, what="the paused lease to run out")
    taker = workers()
    wait_for(lambda: row(ledger, ref.id)["state"] == "done", timeout=30, what="the rescue")
    rescued = row(ledger, ref.id)
    assert rescued["attempt"] == 2
    assert rescued["output"] == {"key": "k2", "pid": taker.pid, "attempt": 2}

    open_gate(ledger, "g2")  # let the paused body run to its end once it wakes up
    paused.resume()

    def paused_body_ended() -> list[dict[str, Any]]:
        ends = effects(ledger, "end") + effects(ledger, "aborted")
        return [e for e in ends if e["pid"] == paused.pid]

    wait_for(paused_body_ended, timeout=20, what="the paused body to finish or be stopped")
    assert [e["attempt"] for e in paused_body_ended()] == [1]
    wait_for(
        lambda: "fenced" in paused.output() or "UJ_LEASE_LOST" in paused.output(),
        timeout=20,
        what="the paused worker to report its write fenced or its lease lost",
    )
    paused.term()  # the shutdown flushes whatever the paused worker still had to write
    assert paused.wait(timeout=15) == 0

    assert row(ledger, ref.id) == rescued  # state, attempt, output, error, timestamps: untouched
    assert [e["attempt"] for e in effects(ledger, "end") if e["pid"] == taker.pid] == [2]


def test_sigterm_shutdown_finishes_what_it_can_and_hands_the_rest_back_uncounted(
    client: Client, ledger: Db, workers: Any, queue: str
) -> None:
    keys = [f"t{i}" for i in range(6)]
    call = fault_jobs.blocking.configure(queue=queue)
    refs = dict(
        zip(keys, client.enqueue_many([call.call(k, gate=f"gate-{k}") for k in keys]), strict=True)
    )
    ids = [ref.id for ref in refs.values()]
    shutdown_s = 2.0
    worker = workers("-c", "2", "--shutdown-timeout", str(shutdown_s))
    wait_for(lambda: len(effects(ledger, "start")) == 2, what="two bodies to start")
    wait_for(
        lambda: (
            ledger.execute(
                "select count(*) from x_jobs where id = any(%s) and state = 'running' and attempt = 1",
                (ids,),
            ).fetchone()
            == (6,)
        ),
        what="all six jobs claimed (two running, four prefetched)",
    )
    running = sorted(e["key"] for e in effects(ledger, "start"))
    finishing, stuck = running
    prefetched = [k for k in keys if k not in running]

    signalled_at = db_now(ledger)
    sent = time.monotonic()
    worker.term()
    wait_for(
        lambda: "shutting down" in worker.output(),
        timeout=10,
        what="the worker to start shutting down",
    )
    late = fault_jobs.blocking.configure(client=client, queue=queue).enqueue("late")
    # The prefetched jobs are handed back at once (before the running bodies are waited for).
    wait_for(
        lambda: all(row(ledger, refs[k].id)["state"] == "ready" for k in prefetched),
        timeout=10,
        what="the prefetched jobs to be handed back",
    )
    open_gate(ledger, f"gate-{finishing}")  # this body ends within the shutdown timeout
    assert worker.wait(timeout=shutdown_s + 10) == 0
    took = time.monotonic() - sent
    assert took < shutdown_s + 8, f"the shutdown took {took:.1f}s"

    done = row(ledger, refs[finishing].id)
    assert done["state"] == "done" and done["attempt"] == 1
    assert done["output"] == {"key": finishing, "pid": worker.pid, "attempt": 1}
    assert [e["at"] > signalled_at for e in effects(ledger, "end")] == [True]
    for key in [stuck, *prefetched]:
        r = row(ledger, refs[key].id)
        assert (r["state"], r["attempt"], r["lease_token"]) == ("ready", 0, None), key
        assert "UJ_WORKER_DRAINING" in (r["last_error"] or ""), key
    # Nothing started after the signal: only the two bodies running before it ever started,
    # not even in the slot the finished body freed, nor the job enqueued during the shutdown.
    starts = effects(ledger, "start")
    assert sorted(e["key"] for e in starts) == running
    assert all(e["at"] < signalled_at for e in starts)
    assert (row(ledger, late.id)["state"], row(ledger, late.id)["attempt"]) == ("ready", 0)


def test_a_prefetched_job_never_starts_once_a_stop_was_requested(
    client: Client, ledger: Db, queue: str, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, to hold the window open: between the signal (``request_stop``) and the
    shutdown's hand-back (``stop``), a body slot that frees up must not start a prefetched job."""
    monkeypatch.setenv("UJOBS_DATABASE_URL", dsn)
    call = fault_jobs.blocking.configure(queue=queue)
    first, second = client.enqueue_many([call.call("p1", gate="gp1"), call.call("p2", gate="gp2")])
    worker = Worker(
        dsn, from_module(fault_jobs), WorkerConfig(queues=(queue,), concurrency=1, lease_s=2)
    )
    try:
        worker.start()
        wait_for(
            lambda: worker.in_flight() == 2 and effects(ledger, "start"),
            what="one running, one prefetched",
        )
        [running] = effects(ledger, "start")
        waiting = second if running["job_id"] == first.id else first
        worker.request_stop()  # what SIGTERM does first
        open_gate(ledger, f"g{running['key']}")
        wait_for(lambda: worker.in_flight() == 1, what="the running body to end and free its slot")
    finally:
        worker.stop(timeout_s=2)
    assert [e["key"] for e in effects(ledger, "start")] == [running["key"]]
    assert row(ledger, running["job_id"])["state"] == "done"
    handed_back = row(ledger, waiting.id)
    assert (handed_back["state"], handed_back["attempt"]) == ("ready", 0)
    assert "UJ_WORKER_DRAINING" in (handed_back["last_error"] or "")


def test_a_cli_cancel_reaches_the_running_body_and_the_job_never_runs_again(
    client: Client, ledger: Db, workers: Any, queue: str, dsn: str
) -> None:
    ref = fault_jobs.blocking.configure(client=client, queue=queue).enqueue("c1", gate="never")
    workers()
    wait_for(lambda: effects(ledger, "start"), what="the body to start")
    cli = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "jobs", "cancel", str(ref.id), "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=TESTS_DIR,
        check=False,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    wait_for(
        lambda: effects(ledger, "aborted", "c1"), timeout=10, what="the body to see the cancel"
    )
    cancelled = row(ledger, ref.id)
    assert cancelled["state"] == "cancelled" and cancelled["attempt"] == 1
    assert "UJ_JOB_CANCELLED" in (cancelled["last_error"] or "")
    [seen] = effects(ledger, "aborted", "c1")
    assert seen["detail"] == "UJ_JOB_CANCELLED"
    assert seen["at"] - cancelled["finished_at"] < timedelta(seconds=2)

    # The worker goes on claiming (a later job runs) and the cancelled one is never run again.
    after = fault_jobs.noop.configure(client=client, queue=queue).enqueue("after")
    wait_for(
        lambda: row(ledger, after.id)["state"] == "done", timeout=15, what="a later job to run"
    )
    assert row(ledger, ref.id) == cancelled
    assert len(effects(ledger, "start", "c1")) == 1
    assert effects(ledger, "end", "c1") == []


def test_a_job_that_kills_its_worker_every_time_dead_letters_after_max_attempts(
    client: Client, ledger: Db, workers: Any, queue: str
) -> None:
    """Its first start is recorded with the next write after the body began, so the kill may
    come first and cost it nothing; from its second delivery on its start is recorded before it
    runs. It dead-letters after its two attempts, having killed two or three workers."""
    ref = fault_jobs.kills_its_worker.configure(client=client, queue=queue).enqueue("boom")
    killed: list[WorkerProc] = []
    for _ in range(5):  # two or three runs kill their workers; the next worker dead-letters
        proc = workers()
        wait_for(
            lambda p=proc: p.proc.poll() is not None or row(ledger, ref.id)["state"] == "dead",
            timeout=30,
            what="the worker to die or the job to dead-letter",
        )
        if row(ledger, ref.id)["state"] == "dead":
            break
        killed.append(proc)
        wait_for(lambda: lease_ran_out(ledger, ref.id), timeout=10, what="the lease to run out")

    r = row(ledger, ref.id)
    assert (r["state"], r["attempt"]) == ("dead", 2)
    assert "UJ_WORKER_LOST" in (r["last_error"] or "")
    assert r["finished_at"] is not None
    runs = effects(ledger, "start")
    assert 2 <= len(killed) <= 3 and [e["pid"] for e in runs] == [p.pid for p in killed]
    assert [e["attempt"] for e in runs][-2:] == [1, 2]  # the last two runs were charged


def test_a_prefetched_job_that_kills_its_worker_every_time_still_dead_letters(
    client: Client, ledger: Db, workers: Any, queue: str
) -> None:
    """The same job held in a worker's prefetch (``-c 1``, behind a running body): its first
    start is recorded with the next outcome write, so the kill may come first and cost it
    nothing; from its second delivery on its start is recorded before it runs. It dead-letters
    after its two attempts, having run two or three times."""
    fault_jobs.blocking.configure(client=client, queue=queue, priority=1).enqueue(
        "ahead", gate="g-ahead"
    )
    ref = fault_jobs.kills_its_worker.configure(client=client, queue=queue).enqueue("boom")
    first = workers("-c", "1")
    wait_for(lambda: effects(ledger, "start", "ahead"), what="the job ahead to start")
    wait_for(lambda: row(ledger, ref.id)["state"] == "running", what="the killer prefetched")
    open_gate(ledger, "g-ahead")
    killed = [first]
    wait_for(lambda: first.proc.poll() is not None, timeout=30, what="the first kill")
    for _ in range(4):
        if row(ledger, ref.id)["state"] == "dead":
            break
        wait_for(lambda: lease_ran_out(ledger, ref.id), timeout=10, what="the lease to run out")
        proc = workers("-c", "1")
        wait_for(
            lambda p=proc: p.proc.poll() is not None or row(ledger, ref.id)["state"] == "dead",
            timeout=30,
            what="the worker to die or the job to dead-letter",
        )
        if proc.proc.poll() is not None:
            killed.append(proc)
    r = row(ledger, ref.id)
    assert (r["state"], r["attempt"]) == ("dead", 2)
    assert "UJ_WORKER_LOST" in (r["last_error"] or "")
    runs = effects(ledger, "start", "boom")
    assert 2 <= len(runs) <= 3 and len(runs) == len(killed)
    assert [e["attempt"] for e in runs][-2:] == [1, 2]  # the last two runs were charged


def test_an_outcome_survives_its_claim_connection_being_killed(
    dsn: str, client: Client, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends the worker's claim connection while a body runs (a failover, an admin's
    pg_terminate_backend): the finished body's outcome is kept, written on a new connection, and
    the job is neither run again nor charged a second attempt."""
    from apps import gate_jobs

    caplog.set_level("WARNING", logger="ujobs.worker")
    gate_jobs.STARTED.clear()
    gate_jobs.GATE.clear()
    ref = gate_jobs.gated.configure(client=client).enqueue()
    worker = Worker(dsn, from_module(gate_jobs), WorkerConfig(queues=("gate",), poll_s=0.05))
    worker.start()
    try:
        assert gate_jobs.STARTED.wait(30), "the body never started"
        claim_conn = f"ujobs:worker:{worker.id}"[:63]
        claim_pids = "select array_agg(pid) from pg_stat_activity where datname = current_database() and application_name = %s"
        killed = db.execute(claim_pids, (claim_conn,)).fetchone()
        wait_for(
            lambda: (
                db.execute(
                    "select count(pg_terminate_backend(pid)) from pg_stat_activity where datname = current_database() and application_name = %s",
                    (claim_conn,),
                ).fetchone()
                == (1,)
            ),
            what="the claim connection to be killed",
        )
        gate_jobs.GATE.set()
        wait_for(
            lambda: (
                db.execute(
                    "select state, attempt, output from x_jobs where id = %s", (ref.id,)
                ).fetchone()
                == ("done", 1, "through")
            ),
            timeout=30,
            what="the outcome written on a fresh connection",
        )
        # The dead connection was replaced (found dead on checkout, or after one failed pass).
        now = db.execute(claim_pids, (claim_conn,)).fetchone()
        assert (
            now is not None and killed is not None and now[0] and not set(now[0]) & set(killed[0])
        )
    finally:
        gate_jobs.GATE.set()
        worker.stop(timeout_s=5)
