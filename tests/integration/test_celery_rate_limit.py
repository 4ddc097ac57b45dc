"""``rate_limit`` holds for the whole fleet: workers share one token bucket per task name.

Why it exists: Celery's limit is per worker process; ours is a row every worker takes tokens
from. These tests drive two workers on one frozen clock with ``tick()``, so what runs when is
decided by the bucket alone, never by how fast this machine is.

What it is not: a timing benchmark; nothing here measures elapsed wall time.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    worker,
)
from ujobs_bridge import FrozenClock

RUNS: list[int] = []


@t.app.task(name="tests.celery_rate.limited", rate_limit="6/m")  # one token per 10 s
def limited(n: int) -> int:
    RUNS.append(n)
    return n


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    RUNS.clear()
    with bound(t.app, dsn):
        yield t.app
    t.app.conf.worker_disable_rate_limits = False


def states(dsn: str) -> list[str]:
    return sorted(j["state"] for j in jobs(dsn, limited.name))


def test_two_workers_share_one_bucket_and_the_rest_wait_for_refills(app: Any, dsn: str) -> None:
    clock = FrozenClock(datetime.now(UTC) + timedelta(minutes=1))
    for n in range(3):
        limited.delay(n)
    with (
        worker(app, dsn, clock=clock, start=False) as a,
        worker(app, dsn, clock=clock, start=False) as b,
    ):
        a.tick()
        b.tick()
        assert len(RUNS) == 1  # one token for the fleet, not one per worker
        assert states(dsn) == ["done", "ready", "ready"]
        later = [j["run_at"] for j in jobs(dsn, limited.name) if j["state"] == "ready"]
        assert all(r == clock.now() + timedelta(seconds=10) for r in later)  # snoozed one refill

        clock.advance(timedelta(seconds=5))
        a.tick()
        b.tick()
        assert len(RUNS) == 1  # not due yet, and half a token is not a token

        clock.advance(timedelta(seconds=5))
        a.tick()
        b.tick()
        assert len(RUNS) == 2  # exactly one refill in 10 s
        clock.advance(timedelta(seconds=10))
        a.tick()
        b.tick()
    assert sorted(RUNS) == [0, 1, 2] and states(dsn) == ["done", "done", "done"]
    assert all(j["attempt"] <= 1 for j in jobs(dsn, limited.name))  # waiting cost no attempts


def test_worker_disable_rate_limits_turns_it_off(app: Any, dsn: str) -> None:
    app.conf.worker_disable_rate_limits = True
    clock = FrozenClock(datetime.now(UTC) + timedelta(minutes=1))
    for n in range(3):
        limited.delay(n)
    with worker(app, dsn, clock=clock, start=False) as w:
        w.tick()
    assert sorted(RUNS) == [0, 1, 2]


def test_the_rate_limit_settings_are_read_when_the_worker_loads_the_tasks(
    app: Any, dsn: str
) -> None:
    """As Celery's worker reads them at start: a change to ``app.conf`` after that is not seen
    by the running worker (the task's own ``rate_limit``, which remote control changes, is)."""
    clock = FrozenClock(datetime.now(UTC) + timedelta(minutes=1))
    for n in range(3):
        limited.delay(n)
    with worker(app, dsn, clock=clock, start=False) as w:
        app.conf.worker_disable_rate_limits = True  # after the worker loaded the tasks
        w.tick()
        assert len(RUNS) == 1  # still limited: one token
    app.conf.worker_disable_rate_limits = False
    clock.advance(timedelta(seconds=10))  # the two snoozed are due (one token refilled)
    with worker(app, dsn, clock=clock, start=False) as w:
        limited.rate_limit = None  # what the rate_limit command does on a running worker
        try:
            w.tick()
        finally:
            limited.rate_limit = "6/m"
    assert sorted(RUNS) == [0, 1, 2]  # both: no limit once the task's own says none
