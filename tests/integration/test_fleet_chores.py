"""A fleet runs its fleet-wide chores (the rescue sweep, the node reap) about as often as one
worker would, and still runs them: a lost lease is rescued by a fleet of workers, a lone worker
sweeps at once on start and then every ``sweep_s`` exactly (``ujobs_bridge._internal.worker.fleet``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from apps import delivery_jobs
from conftest import wait_for
from ujobs_bridge import Worker, WorkerConfig
from ujobs_bridge._internal.config.loading import from_module
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.worker import fleet
from ujobs_bridge.client import Client

QUEUE = "deliveries"


def test_a_lone_worker_sweeps_at_once_then_every_interval_exactly() -> None:
    chore = fleet.Chore(5.0, rand=lambda: 0.9)
    assert chore.due(100.0, 1)
    chore.ran(100.0)
    assert not chore.due(104.9, 1)
    assert chore.due(105.0, 1)
    assert fleet.Chore(5.0).due(100.0, 0)  # not counted yet: alone


def test_in_a_fleet_each_worker_spreads_its_runs_over_the_fleet_with_jitter() -> None:
    draws = iter([0.5, 0.25, 0.0, 1.0])
    chore = fleet.Chore(2.0, rand=lambda: next(draws))
    # 10 workers: each waits 5..15 intervals, 10 on average: the fleet runs one per interval.
    assert chore.gap(10) == 20.0
    # a fleet started together does not run its first chores together: a quarter of a gap in
    assert not chore.due(100.0, 10)
    assert not chore.due(114.9, 10)
    assert chore.due(115.0, 10)
    chore.ran(115.0)
    assert chore.gap(10) == 10.0  # the jitter is drawn anew after each run
    # capped: a count that lags a shrinking fleet cannot stretch a worker's gap for long
    assert chore.gap(500) == 2.0 * fleet.SPREAD_MAX * 0.5


def test_a_worker_whose_fleet_shrank_runs_its_chore_after_one_interval() -> None:
    chore = fleet.Chore(2.0, rand=lambda: 0.5)
    chore.ran(100.0)
    assert not chore.due(103.0, 10)  # ten workers: every 20 s
    assert chore.due(103.0, 1)  # the others are gone: every 2 s again, from its last run


@pytest.fixture
def fleet_of_three(dsn: str) -> Iterator[list[Worker]]:
    delivery_jobs.SEEN.clear()
    config = WorkerConfig(queues=(QUEUE,), sweep_s=0.2, lease_s=6.0, poll_s=0.2)
    workers = [Worker(dsn, from_module(delivery_jobs), config) for _ in range(3)]
    try:
        for w in workers:
            w.start()
        yield workers
    finally:
        for w in workers:
            w.stop(timeout_s=2)


def test_each_worker_of_a_fleet_counts_the_live_nodes(fleet_of_three: list[Worker]) -> None:
    for w in fleet_of_three:
        w.presence.refresh_soon()
    wait_for(
        lambda: all(w.presence.fleet == 3 for w in fleet_of_three),
        timeout=30,
        what="every worker to count three live nodes",
    )


def test_a_fleet_still_rescues_a_lost_lease(
    client: Client, fleet_of_three: list[Worker], db: psycopg.Connection[Any]
) -> None:
    # On a queue the fleet does not consume, so no worker of it claims the job first: the
    # rescue is fleet-wide (every queue), the claim is not.
    ref = delivery_jobs.report.configure(client=client, queue="elsewhere").enqueue()
    (lost,) = leases_db.job_claim(
        db,
        leases_db.ClaimParams(
            queue="elsewhere",
            names=["apps.delivery_jobs.report"],
            limit=1,
            token=uuid.uuid4(),
            lease_s=0,  # a worker that claims it, then dies: its lease runs out at once
            worker="died",
            now=None,
        ),
    )
    assert lost.id == ref.id

    def state() -> tuple[Any, ...]:
        row = db.execute(
            "select state, deliveries, last_error from x_jobs where id = %s", (ref.id,)
        )
        return tuple(row.fetchone() or ())

    wait_for(lambda: state()[0] == "ready", timeout=60, what="the fleet's sweep to rescue it")
    assert state()[1] == 1
    assert "UJ_WORKER_LOST" in state()[2]


def test_a_fleet_runs_a_trickle_of_single_jobs(
    client: Client, fleet_of_three: list[Worker], db: psycopg.Connection[Any]
) -> None:
    for w in fleet_of_three:
        w.presence.refresh_soon()
    wait_for(lambda: all(w.presence.fleet == 3 for w in fleet_of_three), what="a fleet of 3")
    refs = []
    for _ in range(10):  # one at a time: each wakes the whole fleet, two of three find nothing
        refs.append(delivery_jobs.report.configure(client=client).enqueue())
        wait_for(
            lambda: (
                db.execute("select state from x_jobs where id = %s", (refs[-1].id,)).fetchone()
                == ("done",)
            ),
            timeout=30,
            what="the job to run",
        )
    row = db.execute(
        "select count(*), max(deliveries) from x_jobs where id = any(%s)", ([r.id for r in refs],)
    ).fetchone()
    assert row == (10, 1)
