"""Group commit of step results, in-process against real Postgres: the steps of many bodies that
queue behind a commit in flight are written by ONE statement, yet each ``step.run`` keeps its
own answer (a lost lease, a value the database refuses) and returns only once its row is in.

The write in flight is held at a gate (its connection checkout waits for the test) so the queue
that forms behind it is known, not a matter of timing.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from conftest import wait_for
from ujobs_bridge._internal.clock import SYSTEM_CLOCK
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db import testing as testing_db
from ujobs_bridge._internal.db.connections import Conn, Pool, Role
from ujobs_bridge._internal.db.steps import Lease
from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.jobs.group_commit import GroupCommit
from ujobs_bridge.errors import AttemptAborted, ErrorCode
from ujobs_bridge.steps import StepRunner

BODIES = 6


@pytest.fixture
def pool(dsn: str) -> Iterator[Pool]:
    steps_pool = connections.pool(dsn, Role("test:steps"), min_size=1, max_size=4)
    yield steps_pool
    steps_pool.close()


class Gate:
    """The group commit's connections from ``pool``; the first checkout waits until ``open``."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.reached = threading.Event()
        self.opened = threading.Event()

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        if not self.reached.is_set():
            self.reached.set()
            assert self.opened.wait(60), "the test never opened the gate"
        with self.pool.connection() as conn:
            yield conn


def running_job(db: psycopg.Connection[Any]) -> Lease:
    spec = enqueue_db.EnqueueSpec(
        id=uuid.uuid4(),
        name="gc.job",
        queue="gc",
        input_json='{"args": [], "kwargs": {}}',
        max_attempts=3,
    )
    (enqueued,) = enqueue_db.job_enqueue_many(db, [spec], None)
    claimed = testing_db.job_claim_by_id(
        db,
        testing_db.ClaimById(id=enqueued.id, token=uuid.uuid4(), lease_s=60, worker="t", now=None),
    )
    assert claimed is not None
    return Lease(claimed.id, claimed.lease_token, claimed.attempt)


def stored(db: psycopg.Connection[Any], lease: Lease) -> list[tuple[Any, ...]]:
    return db.execute(
        "select name, status, output from x_job_steps where run_id = %s", (lease.run_id,)
    ).fetchall()


def run_queued(
    db: psycopg.Connection[Any], pool: Pool, values: list[Any], before_open: Any = None
) -> tuple[list[Lease], list[StepRunner], GroupCommit, dict[int, Any]]:
    """One step in each of ``len(values)`` bodies: the first is written alone (held at the
    gate), the rest queue behind it; ``before_open(leases)`` runs while they wait."""
    leases = [running_job(db) for _ in values]
    gate = Gate(pool)
    commits = GroupCommit(gate.connection, in_flight=1)
    runners = [
        StepRunner(
            lease=lease,
            connection=pool.connection,
            signal=AttemptSignal(),
            clock=SYSTEM_CLOCK,
            commits=commits,
        )
        for lease in leases
    ]
    outcomes: dict[int, Any] = {}

    def body(i: int) -> None:
        try:
            outcomes[i] = runners[i].run("charge", lambda: values[i])
        except BaseException as exc:  # AttemptAborted is one, so no body swallows it
            outcomes[i] = exc

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(values))]
    threads[0].start()
    assert gate.reached.wait(30), "the first step never reached its write"
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: commits.waiting() == len(values) - 1, what="the other steps to queue")
    if before_open is not None:
        before_open(leases)
    assert not outcomes  # nobody returned before the commit that holds its row
    gate.opened.set()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == len(values)
    return leases, runners, commits, outcomes


def test_steps_queued_behind_a_commit_share_one_statement_and_each_returns_its_value(
    db: Any, pool: Pool
) -> None:
    values = [f"v{i}" for i in range(BODIES)]
    leases, _runners, commits, outcomes = run_queued(db, pool, values)
    assert outcomes == dict(enumerate(values))
    # the first step was written at once, alone; the five that queued meanwhile, together
    assert (commits.statements, commits.results) == (2, BODIES)
    for lease, value in zip(leases, values, strict=True):
        assert stored(db, lease) == [("charge", "completed", value)]


def test_a_lost_lease_in_a_batch_fails_only_its_own_step(db: Any, pool: Pool) -> None:
    values = [f"v{i}" for i in range(BODIES)]
    lost = 3

    def take_over(leases: list[Lease]) -> None:  # another worker rescued and re-claimed it
        db.execute(
            "update x_jobs set lease_token = %s where id = %s",
            (uuid.uuid4(), leases[lost].run_id),
        )

    leases, runners, commits, outcomes = run_queued(db, pool, values, take_over)
    assert (commits.statements, commits.results) == (2, BODIES)  # still one statement
    failed = outcomes.pop(lost)
    assert isinstance(failed, AttemptAborted) and failed.code is ErrorCode.LEASE_LOST
    assert runners[lost].signal.aborted and runners[lost].signal.code is ErrorCode.LEASE_LOST
    assert stored(db, leases[lost]) == []  # nothing written under the lost lease
    for i, value in outcomes.items():
        assert value == values[i] and not runners[i].signal.aborted
        assert stored(db, leases[i]) == [("charge", "completed", value)]


def test_a_value_the_database_refuses_fails_only_its_own_step(db: Any, pool: Pool) -> None:
    values: list[Any] = [{"n": i} for i in range(BODIES)]
    poison = 2
    values[poison] = "NUL \x00 is valid JSON text but jsonb holds no NUL"
    leases, _runners, _commits, outcomes = run_queued(db, pool, values)
    failed = outcomes.pop(poison)
    assert isinstance(failed, psycopg.DataError)  # the statement's, not an outage: raised as is
    assert stored(db, leases[poison]) == []
    for i, value in outcomes.items():
        assert value == values[i]
        assert stored(db, leases[i]) == [("charge", "completed", value)]


def test_a_lone_body_writes_each_step_at_once(db: Any, pool: Pool) -> None:
    lease = running_job(db)
    commits = GroupCommit(pool.connection)
    runner = StepRunner(
        lease=lease,
        connection=pool.connection,
        signal=AttemptSignal(),
        clock=SYSTEM_CLOCK,
        commits=commits,
    )
    for i in range(3):
        assert runner.run(f"s{i}", lambda i=i: i) == i
        assert commits.waiting() == 0 and commits.statements == i + 1  # written, not queued
    assert [row[2] for row in stored(db, lease)] == [0, 1, 2]


def test_the_bodies_a_commit_released_share_the_next_commit(db: Any, pool: Pool) -> None:
    """Body 0 of three steps, bodies 1 and 2 of two: the first step of body 0 is written alone
    (held at the gate), bodies 1 and 2 queue behind it. The batch after it waits for body 0 to
    come back with its second step, and the one after that for all three bodies: three
    statements, not one batch for whoever is back first and another for the rest. (Every body
    the last commit released writes again, so no batch waits out its gathering deadline.)"""
    leases = [running_job(db) for _ in range(3)]
    gate = Gate(pool)
    commits = GroupCommit(gate.connection, in_flight=1, gather_max_s=30.0, gather_share=1e6)
    runners = [
        StepRunner(
            lease=lease,
            connection=pool.connection,
            signal=AttemptSignal(),
            clock=SYSTEM_CLOCK,
            commits=commits,
            fresh=True,
        )
        for lease in leases
    ]
    done: dict[int, list[int]] = {}

    def body(i: int) -> None:
        steps = 3 if i == 0 else 2
        done[i] = [runners[i].run(f"s{k}", lambda k=k: i * 10 + k) for k in range(steps)]

    threads = [threading.Thread(target=body, args=(i,)) for i in range(3)]
    threads[0].start()
    assert gate.reached.wait(30), "the first step never reached its write"
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: commits.waiting() == 2, what="the other first steps to queue")
    gate.opened.set()
    for thread in threads:
        thread.join(60)
    assert done == {0: [0, 1, 2], 1: [10, 11], 2: [20, 21]}
    assert (commits.statements, commits.results) == (3, 7)
    for i, lease in enumerate(leases):
        steps = 3 if i == 0 else 2
        assert stored(db, lease) == [(f"s{k}", "completed", i * 10 + k) for k in range(steps)]


class Counted:
    """``pool``'s connections, counted as they are taken."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.taken = 0

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        self.taken += 1
        with self.pool.connection() as conn:
            yield conn


@pytest.mark.parametrize("fresh", [True, False])
def test_a_first_claim_runs_its_steps_without_reading_stored_ones(
    db: Any, pool: Pool, fresh: bool
) -> None:
    """``fresh`` (the worker's claim is the row's first): one connection per step, none to read
    stored steps back; otherwise the stored steps are read once, before the first step."""
    lease = running_job(db)
    counted = Counted(pool)
    runner = StepRunner(
        lease=lease,
        connection=counted.connection,
        signal=AttemptSignal(),
        clock=SYSTEM_CLOCK,
        commits=GroupCommit(counted.connection),
        fresh=fresh,
    )
    assert [runner.run(f"s{i}", lambda i=i: i) for i in range(3)] == [0, 1, 2]
    assert counted.taken == (3 if fresh else 4)
    assert [row[2] for row in stored(db, lease)] == [0, 1, 2]
