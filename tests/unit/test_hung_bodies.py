"""Hung bodies and oversize results, below the worker: the rules the process tests rest on.

Why it exists: ``tests/slow/test_worker_wedges.py`` proves them on real worker processes; these
pin, without a database, the three rules underneath: a body thread that hangs can be abandoned
(a new thread serves its slot at once, the old one ends when its body returns, at most ``cap``
run), the in-flight table keeps two attempts of one job apart (a retry claimed while the hung
attempt's body still runs), and a result over the limit fails its attempt without being
stored or retried.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from ujobs_bridge import job
from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.jobs.payload import result_size
from ujobs_bridge._internal.worker.attempt import run_body, settle
from ujobs_bridge._internal.worker.body_threads import BodyThreads
from ujobs_bridge._internal.worker.inflight import InFlightTable
from ujobs_bridge._internal.worker.outcome_batch import OutcomeBatch
from ujobs_bridge.errors import ErrorCode, PayloadError
from ujobs_bridge.records import ClaimedJob, JobState


def claimed(job_id: uuid.UUID | None = None, name: str = "x") -> ClaimedJob:
    return ClaimedJob(
        id=job_id or uuid.uuid4(),
        name=name,
        queue="q",
        input={"args": [], "kwargs": {}},
        attempt=1,
        max_attempts=3,
        lease_token=uuid.uuid4(),
        expired=False,
    )


def test_an_abandoned_thread_gives_its_slot_to_a_new_one_and_ends_when_its_body_returns() -> None:
    release = threading.Event()
    ran: list[str] = []
    done = threading.Semaphore(0)

    hanging = threading.Event()
    threads: dict[str, threading.Thread] = {}

    def run(item: str) -> None:
        if item.startswith("hang"):
            hanging.set()
            release.wait(30)
        ran.append(f"{item}@{threading.current_thread().name}")
        threads[item] = threading.current_thread()
        done.release()

    pool: BodyThreads[str] = BodyThreads(1, run)
    pool.submit("hang-1")
    pool.submit("quick")
    assert hanging.wait(10)
    assert not done.acquire(timeout=0.2)  # the one thread hangs: "quick" waits behind it
    assert pool.abandon("hang-1", cap=1) is True
    assert done.acquire(timeout=5) and ran == ["quick@ujobs-body-1"]  # a new thread ran it
    pool.submit("hang-2")
    for _ in range(50):  # "hang-2" started on the new thread
        if pool.abandon("hang-2", cap=1) is not None:
            break
        threading.Event().wait(0.02)
    assert pool.abandon("hang-2", cap=1) is False  # one abandoned thread runs: the cap
    assert pool.abandon("never-submitted", cap=5) is None
    assert pool.abandoned == 1
    release.set()
    assert done.acquire(timeout=5) and done.acquire(timeout=5)
    for _ in range(250):  # the abandoned thread ends once its body returned
        if pool.abandoned == 0:
            break
        threading.Event().wait(0.02)
    assert pool.abandoned == 0
    threads["hang-1"].join(5)  # the abandoned thread ended; the one that took its slot serves on
    assert not threads["hang-1"].is_alive() and threads["quick"].is_alive()
    pool.shutdown()


def test_two_attempts_of_one_job_are_held_apart_and_an_abandoned_one_holds_no_slot() -> None:
    table = InFlightTable(OutcomeBatch(threshold=10, interval_s=60), threading.Event())
    definition: Any = object()
    first = claimed()
    [old] = table.add([(first, definition)])
    table.settle_once(old, None, release=False)  # timed out; its body still runs
    table.abandon(old)
    assert len(table) == 0 and table.entries() == [old]
    retry = claimed(first.id)  # the same job, claimed again by this worker
    [new] = table.add([(retry, definition)])
    assert len(table) == 1 and table.get(first.id) is new
    assert table.held_leases() == [(retry.id, retry.lease_token)]
    table.settle_once(old, None, release=True)  # the hung body returned at last
    assert table.entries() == [new] and len(table) == 1 and table.get(first.id) is new


def test_a_result_over_the_limit_fails_its_attempt_without_a_traceback_or_a_retry() -> None:
    @job(queue="q", name="big")
    def big() -> str:
        return "y" * 5000

    ticket = claimed(name="big")
    signal = AttemptSignal()
    result = run_body(big, ticket, signal, max_result_bytes=1000)
    assert result.output_json is None and isinstance(result.error, PayloadError)
    assert result.error.code is ErrorCode.OUTPUT_TOO_LARGE and result.error.__traceback__ is None
    assert "5,002 bytes" in result.error.message and "1,000" in result.error.message
    outcome = settle(big, ticket, result, signal)
    assert outcome is not None and outcome.state is JobState.DEAD  # the same body would again
    assert outcome.output_json is None and "UJ_OUTPUT_TOO_LARGE" in (outcome.error or "")
    fine = run_body(big, ticket, signal, max_result_bytes=5002)
    assert fine.error is None and fine.output_json is not None


def test_a_result_is_measured_in_bytes_of_utf8() -> None:
    assert result_size('"abc"', 5) is None
    assert result_size('"abcd"', 5) == 6
    assert result_size('"é"', 4) is None  # 3 characters, 4 bytes
    assert result_size('"éé"', 5) == 6  # 4 characters, 6 bytes
