"""Real worker processes that must not wedge: hung bodies, a stuck settle, a dead claim
connection, and orphan children.

Why it exists: a worker that stays up but makes no progress is worse than one that dies: its
heartbeat keeps renewing leases of jobs it will never run, so no other worker can rescue them.
Each test runs ``python -m ujobs_bridge worker`` subprocesses (lease 2 s) on a queue of its own,
makes one thing go wrong (a loop dies, a pool child is SIGKILLed, a row cannot be decoded, bodies
hang past their timeout ignoring every signal, a body raises ``SystemExit``, the worker itself is
SIGKILLed), and asserts on the job rows, the effect ledger (``apps/wedge_jobs.py``) and the
processes: the worker goes on, or exits non-zero after handing back what it held.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_worker_faults import effects, open_gate, row
from worker_proc import WorkerProc

from apps import wedge_jobs
from conftest import wait_for
from ujobs_bridge import Worker, WorkerConfig
from ujobs_bridge._internal.config.loading import from_module
from ujobs_bridge.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
APP = "apps.wedge_jobs"


@pytest.fixture
def queue() -> str:
    return f"ww_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def workers(dsn: str, queue: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(*extra: str, faults: str = "") -> WorkerProc:
        log = tmp_path / f"worker{len(started)}.log"
        proc = WorkerProc(dsn, APP, queue, log, extra=list(extra), faults=faults)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
        with contextlib.suppress(ProcessLookupError):  # what outlived its worker
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in started:
        print(f"--- worker {proc.pid} (exit {proc.proc.returncode}) ---\n{proc.output()[-6000:]}")


def states(db: Any, ids: list[Any]) -> dict[str, int]:
    found = db.execute(
        "select state, count(*) from x_jobs where id = any(%s) group by state", (ids,)
    ).fetchall()
    return dict(found)


def children_of(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ---------------------------------------------------------------- fault 7: SystemExit from a body


@pytest.mark.parametrize("pool", ["threads", "processes"])
@pytest.mark.parametrize("kind", ["exit", "interrupt"])
def test_a_body_raising_systemexit_or_keyboardinterrupt_is_a_counted_failure(
    client: Client, ledger: Any, workers: Any, queue: str, kind: str, pool: str
) -> None:
    ref = wedge_jobs.exits.configure(client=client, queue=queue).enqueue("x", kind)
    worker = workers("--pool", pool, "-c", "1")
    wait_for(
        lambda: row(ledger, ref.id)["state"] == "dead", timeout=60, what="the job to dead-letter"
    )
    r = row(ledger, ref.id)
    assert r["attempt"] == 3  # max_attempts: every run was counted
    assert ("SystemExit" if kind == "exit" else "KeyboardInterrupt") in (r["last_error"] or "")
    assert [e["attempt"] for e in effects(ledger, "start")] == [1, 2, 3]
    after = wedge_jobs.quick.configure(client=client, queue=queue).enqueue("after")
    wait_for(
        lambda: row(ledger, after.id)["state"] == "done", timeout=30, what="a later job to run"
    )
    assert worker.proc.poll() is None


# ---------------------------------------------------------------- fault 3: no zombies


def test_a_killed_pool_child_is_replaced_and_its_job_retried_counted(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    ref = wedge_jobs.kills_its_child.configure(client=client, queue=queue).enqueue("oom")
    worker = workers("--pool", "processes", "-c", "1")
    wait_for(lambda: row(ledger, ref.id)["state"] == "done", timeout=60, what="the retried job")
    r = row(ledger, ref.id)
    assert r["attempt"] == 2 and r["output"]["attempt"] == 2
    first, second = effects(ledger, "start")
    assert first["pid"] != second["pid"]  # a new child ran the retry
    assert first["pid"] not in children_of(worker.pid)
    quick = wedge_jobs.quick.configure(client=client, queue=queue)
    refs = client.enqueue_many([quick.call(f"q{i}") for i in range(5)])
    ids = [ref.id for ref in refs]
    wait_for(lambda: states(ledger, ids) == {"done": 5}, timeout=30, what="later jobs to run")
    assert worker.proc.poll() is None
    assert "UJ_WORKER_LOST" in worker.output()


def test_a_row_nested_too_deep_to_decode_fails_alone_with_a_reason(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    deep = '{"args": [' + "[" * 990 + "]" * 990 + "]}"  # json.dumps would recurse too
    poison = wedge_jobs.echo.configure(client=client, queue=queue).enqueue("shallow for now")
    ledger.execute(  # as another producer (SQL, an older client) could have written it
        "update x_jobs set input = %s::jsonb where id = %s", (deep, poison.id)
    )
    quick = wedge_jobs.quick.configure(queue=queue)
    ids = [ref.id for ref in client.enqueue_many([quick.call(f"d{i}") for i in range(5)])]
    worker = workers()
    wait_for(
        lambda: row(ledger, poison.id)["state"] == "dead", timeout=30, what="the poison row to fail"
    )
    wait_for(lambda: states(ledger, ids) == {"done": 5}, timeout=30, what="the rest of its batch")
    r = row(ledger, poison.id)
    assert r["attempt"] == 1 and "UJ_PAYLOAD_UNDECODABLE" in r["last_error"]
    assert "nested" in r["last_error"]
    assert [row(ledger, i)["attempt"] for i in ids] == [1] * 5  # nobody else was charged
    later = wedge_jobs.quick.configure(client=client, queue=queue).enqueue("later")
    wait_for(lambda: row(ledger, later.id)["state"] == "done", timeout=30, what="a later job")
    assert worker.proc.poll() is None


@pytest.mark.parametrize("point", ["worker.claim_loop", "heartbeat.tick"])
def test_a_worker_loop_that_dies_ends_the_process_non_zero_after_handing_back(
    client: Client, ledger: Any, workers: Any, queue: str, point: str
) -> None:
    held = wedge_jobs.held.configure(client=client, queue=queue).enqueue("held", gate="later")
    worker = workers(faults=f"{point}=exit")
    code = worker.wait(timeout=60)
    assert code == 70, worker.output()
    r = row(ledger, held.id)
    assert (r["state"], r["attempt"], r["lease_token"]) == ("ready", 0, None)
    assert "UJ_WORKER_FAILED" in (r["last_error"] or "")
    assert "UJ_WORKER_FAILED" in worker.output()
    open_gate(ledger, "later")


# ---------------------------------------------------------------- large results

MB = 1024 * 1024


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def test_an_oversize_result_fails_alone_at_once_and_the_worker_gives_its_memory_back(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    """A body returning a 300 MB string beside 20 quick jobs on ``-c 2`` (lease 2 s): over the
    default limit (64 MB), it fails ``UJ_OUTPUT_TOO_LARGE`` without its statement being built;
    the quick jobs are done on their first attempt, nothing is rescued, and the worker's resident
    memory comes back down."""
    worker = workers("-c", "2")
    wait_for(lambda: "ready:" in worker.output(), timeout=30, what="the worker to start")
    before = rss(worker.pid)
    big = wedge_jobs.big.configure(client=client, queue=queue).enqueue("big", 300)
    quick = wedge_jobs.quick.configure(queue=queue)
    ids = [r.id for r in client.enqueue_many([quick.call(f"q{i}") for i in range(20)])]
    wait_for(lambda: row(ledger, big.id)["state"] == "dead", timeout=30, what="the big result")
    wait_for(lambda: states(ledger, ids) == {"done": 20}, timeout=30, what="the quick jobs")
    r = row(ledger, big.id)
    assert r["output"] is None and r["attempt"] == 1
    assert "UJ_OUTPUT_TOO_LARGE" in r["last_error"] and "--max-result-bytes" in r["last_error"]
    quick_jobs_untouched_and_memory_back(ledger, worker, ids, before)
    assert worker.proc.poll() is None


def test_results_under_the_limit_are_written_while_leases_renew_and_the_limit_is_a_flag(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    """Two 60 MB results (under a raised limit) written beside quick jobs on a 4 s lease: the
    renewals do not wait behind the writes, so no quick job is rescued;
    ``--max-result-bytes`` sets the limit (a 150 MB result over it fails alone), and the memory
    comes back. The lease is twice the other tests': a process that builds and sends 120 MB on a
    machine whose cores are all busy can wait for a core longer than 2 s, and a lease that short
    then runs out whoever renews it."""
    worker = workers("-c", "2", "--max-result-bytes", str(100 * MB), "--lease", "4")
    wait_for(lambda: "ready:" in worker.output(), timeout=30, what="the worker to start")
    before = rss(worker.pid)
    make = wedge_jobs.big.configure(queue=queue)
    bigs = [r.id for r in client.enqueue_many([make.call(f"b{i}", 60) for i in range(2)])]
    over = wedge_jobs.big.configure(client=client, queue=queue).enqueue("over", 150)
    quick = wedge_jobs.quick.configure(queue=queue)
    ids = [r.id for r in client.enqueue_many([quick.call(f"q{i}") for i in range(20)])]
    wait_for(lambda: states(ledger, bigs) == {"done": 2}, timeout=60, what="the big results")
    wait_for(lambda: states(ledger, ids) == {"done": 20}, timeout=30, what="the quick jobs")
    wait_for(lambda: row(ledger, over.id)["state"] == "dead", timeout=30, what="the over-limit")
    assert "UJ_OUTPUT_TOO_LARGE" in row(ledger, over.id)["last_error"]
    sizes = ledger.execute(
        "select length(output #>> '{}') from x_jobs where id = any(%s)", (bigs,)
    ).fetchall()
    assert sizes == [(60 * MB,)] * 2
    quick_jobs_untouched_and_memory_back(ledger, worker, ids, before)


# ---------------------------------------------------------------- fault 6: hung bodies


def test_hung_bodies_give_their_slots_to_new_threads_that_run_the_jobs_behind_them(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    """4 bodies hung past their timeout (ignoring every signal) on a worker with 4 slots, 40
    quick jobs claimed behind them: each hung body's thread is abandoned to a new thread, so the
    same worker runs the 40 on their first attempt; once the bodies return, their threads end."""
    hang = wedge_jobs.hangs.configure(queue=queue)  # priority 10: claimed and started first
    hung = [r.id for r in client.enqueue_many([hang.call(f"h{i}", gate="hung") for i in range(4)])]
    quick = wedge_jobs.quick.configure(queue=queue)
    ids = [r.id for r in client.enqueue_many([quick.call(f"q{i}") for i in range(40)])]
    worker = workers("-c", "4")
    try:
        wait_for(lambda: states(ledger, ids) == {"done": 40}, timeout=60, what="the 40 quick jobs")
        assert {r["output"]["pid"] for r in map(lambda i: row(ledger, i), ids)} == {worker.pid}
        assert {row(ledger, i)["attempt"] for i in ids} == {1}
        for job_id in hung:  # the timed-out attempts were written, their leases not kept
            r = row(ledger, job_id)
            assert (r["state"], r["attempt"], r["lease_token"]) == ("dead", 1, None)
            assert "UJ_JOB_TIMEOUT" in r["last_error"]
            assert f"ujobs.worker.hung: job {job_id}" in worker.output()
        assert worker.output().count("a new thread takes its slot") == 4
    finally:
        open_gate(ledger, "hung")
    wait_for(
        lambda: worker.output().count("ujobs.worker.hung_returned") == 4,
        timeout=30,
        what="the abandoned threads to end as their bodies return",
    )
    more = [r.id for r in client.enqueue_many([quick.call(f"l{i}") for i in range(8)])]
    wait_for(
        lambda: states(ledger, more) == {"done": 8}, timeout=30, what="jobs after the bodies return"
    )
    assert worker.proc.poll() is None


def test_hung_sleeping_bodies_and_their_retries_lose_no_slot_on_two_workers(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    """4 bodies (timeout 2 s, 2 attempts) blocked in ``time.sleep``, never looking at their
    signal, and 40 quick jobs on two workers ``-c 4``: each hung body's thread is abandoned and a
    new thread takes its slot, so the retries hang no slot for good and every quick job runs."""
    sleep = wedge_jobs.sleeps.configure(queue=queue)
    hung = [r.id for r in client.enqueue_many([sleep.call(f"s{i}", 120) for i in range(4)])]
    quick = wedge_jobs.quick.configure(queue=queue)
    ids = [r.id for r in client.enqueue_many([quick.call(f"q{i}") for i in range(40)])]
    first, second = workers("-c", "4"), workers("-c", "4")
    wait_for(lambda: states(ledger, ids) == {"done": 40}, timeout=45, what="the 40 quick jobs")
    assert {row(ledger, i)["attempt"] for i in ids} == {1}
    wait_for(  # both attempts of each timed out, were written, and logged as hung
        lambda: states(ledger, hung) == {"dead": 4}, timeout=30, what="the hung jobs' 2 attempts"
    )
    for job_id in hung:
        r = row(ledger, job_id)
        assert (r["attempt"], r["lease_token"]) == (2, None) and "UJ_JOB_TIMEOUT" in r["last_error"]
    logs = lambda: first.output() + second.output()  # noqa: E731
    wait_for(
        lambda: all(f"ujobs.worker.hung: job {h}" in logs() for h in hung),
        timeout=10,
        what="a hung warning naming each job",
    )
    more = [r.id for r in client.enqueue_many([quick.call(f"m{i}") for i in range(8)])]
    wait_for(lambda: states(ledger, more) == {"done": 8}, timeout=30, what="later quick jobs")
    assert first.proc.poll() is None and second.proc.poll() is None


def test_a_worker_whose_every_slot_hangs_past_the_cap_hands_back_and_exits_70(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    """``-c 2 --max-hung-threads 1``: two bodies hang at once; the first one's thread is
    abandoned, the second is past the cap: the worker hands back what it holds uncounted and
    exits 70 for its supervisor, naming each hung job."""
    sleep = wedge_jobs.sleeps.configure(queue=queue)
    hung = [r.id for r in client.enqueue_many([sleep.call(f"s{i}", 120) for i in range(2)])]
    held = wedge_jobs.held.configure(queue=queue)
    ids = [r.id for r in client.enqueue_many([held.call(f"h{i}", "never") for i in range(6)])]
    worker = workers("-c", "2", "--max-hung-threads", "1")
    assert worker.wait(timeout=30) == 70, worker.output()
    output = worker.output()
    for job_id in hung:
        assert f"ujobs.worker.hung: job {job_id}" in output
        # its first attempt failed at the timeout; a retry claimed since went back uncounted
        r = row(ledger, job_id)
        assert (r["state"], r["attempt"], r["lease_token"]) == ("ready", 1, None)
    assert output.count("[UJ_JOB_TIMEOUT]") == 2
    for job_id in ids:  # the rest went back uncounted
        r = row(ledger, job_id)
        assert (r["state"], r["attempt"], r["lease_token"]) == ("ready", 0, None), r
    assert "UJ_WORKER_FAILED" in output


def test_a_process_pool_hard_time_limit_kills_and_replaces_the_child(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    hung = wedge_jobs.hangs.configure(client=client, queue=queue).enqueue("h", gate="never")
    worker = workers("--pool", "processes", "-c", "1")
    wait_for(lambda: effects(ledger, "start"), timeout=60, what="the body to start")
    [started] = effects(ledger, "start")
    wait_for(lambda: gone(started["pid"]), timeout=30, what="the hung child to be killed")
    wait_for(
        lambda: row(ledger, hung.id)["state"] == "dead", timeout=30, what="the timeout written"
    )
    r = row(ledger, hung.id)
    assert r["attempt"] == 1 and "UJ_JOB_TIMEOUT" in r["last_error"]
    after = wedge_jobs.quick.configure(client=client, queue=queue).enqueue("after")
    wait_for(
        lambda: row(ledger, after.id)["state"] == "done", timeout=60, what="a job on the new child"
    )
    assert row(ledger, after.id)["output"]["pid"] != started["pid"]
    assert worker.proc.poll() is None


# ---------------------------------------------------------------- orphans


def test_pool_children_die_with_a_sigkilled_worker(
    client: Client, ledger: Any, workers: Any, queue: str
) -> None:
    wedge_jobs.spins_in_c.configure(client=client, queue=queue).enqueue("busy")
    worker = workers("--pool", "processes", "-c", "3")
    wait_for(lambda: effects(ledger, "start"), timeout=60, what="a body to start")
    wait_for(lambda: children_of(worker.pid), timeout=60, what="the pool's children")
    children = children_of(worker.pid)
    os.kill(
        worker.pid, signal.SIGKILL
    )  # the worker alone, as the OOM killer does: not its process group
    worker.proc.wait(timeout=10)
    wait_for(lambda: all(gone(pid) for pid in children), timeout=30, what="the children to die")


def test_hung_bodies_are_listed_for_inspect_until_they_return(
    dsn: str, client: Client, ledger: Any, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UJOBS_DATABASE_URL", dsn)
    ref = wedge_jobs.hangs.configure(client=client, queue=queue).enqueue("seen", gate="seen")
    config = WorkerConfig(queues=(queue,), concurrency=1, lease_s=2, poll_s=0.1)
    worker = Worker(dsn, from_module(wedge_jobs), config)
    try:
        worker.start()
        [hung] = wait_for(worker.hung, timeout=30, what="the body to be listed as hung")
        assert (hung.job_id, hung.name, hung.attempt, hung.timeout_s) == (ref.id, ref.name, 1, 1.0)
        assert hung.overdue_s >= 1.0  # the grace after its deadline
        wait_for(
            lambda: row(ledger, ref.id)["state"] == "dead", what="the timed-out attempt written"
        )
        open_gate(ledger, "seen")
        wait_for(lambda: not worker.hung(), timeout=30, what="the returned body to leave the list")
    finally:
        open_gate(ledger, "seen")
        worker.stop(timeout_s=2)


def quick_jobs_untouched_and_memory_back(
    ledger: Any, worker: Any, ids: list[Any], before: int
) -> None:
    """Every quick job done at its first attempt with no error, nothing rescued or fenced in the
    worker's log, and its resident memory back within 40 MB of ``before``."""
    assert [(row(ledger, i)["attempt"], row(ledger, i)["last_error"]) for i in ids] == [
        (1, None)
    ] * len(ids)
    assert "rescued" not in worker.output() and "fenced" not in worker.output()
    wait_for(
        lambda: rss(worker.pid) < before + 40 * MB,
        timeout=15,
        what=f"the worker's memory to come back (from {before // MB} MB)",
    )
