"""Celery's retries on the bridge, with one frozen clock for Celery (countdown → eta) and the
worker: each retry is a new row whose ``run_at`` is Celery's countdown to the microsecond
(autoretry backoff formula, full jitter, ``self.retry(countdown=)``, ``default_retry_delay``),
the state reads RETRY while it waits, and the limit ends in the exception Celery raises."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import celery.utils.time
import pytest
from celery import states
from celery.exceptions import MaxRetriesExceededError

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    eta_of,
    frozen_app_clock,
    headers_of,
    jobs,
    worker,
)
from ujobs_bridge import FrozenClock


def start() -> datetime:
    """The frozen instant, 5 minutes ahead of the test's own now (taken when the test starts, not
    when the module is imported: a test run later than that would see its jobs not yet due)."""
    return datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app


@pytest.fixture
def clock(app: Any, monkeypatch: Any) -> FrozenClock:
    return frozen_app_clock(app, monkeypatch, start())


def run_retries(w: Any, clock: FrozenClock, dsn: str, name: str, r: Any, runs: int) -> list[float]:
    """Tick the worker ``runs`` times; after each run that retried, read the new row's countdown
    (its run_at minus the frozen now), check the state reads RETRY, and move the clock there."""
    countdowns: list[float] = []
    for n in range(runs):
        assert w.tick() == 1, f"run {n} was not claimed"
        rows = jobs(dsn, name)
        if len(rows) == n + 1:
            break  # no new message: this run did not retry
        newest = rows[-1]
        assert headers_of(newest)["retries"] == n + 1
        assert headers_of(newest)["id"] == r.id
        assert r.state == states.RETRY
        if headers_of(newest)["eta"] is None:  # countdown 0: Celery sends no eta, due at once
            countdowns.append(0)
            continue
        delta = eta_of(newest) - clock.now()
        countdowns.append(delta / timedelta(seconds=1))
        clock.advance(delta)
    return countdowns


def test_autoretry_backoff_countdowns_equal_celerys_formula(
    app: Any, dsn: str, clock: FrozenClock
) -> None:
    # retry_backoff=3, retry_backoff_max=10, no jitter, retry_kwargs max_retries=4:
    # countdown = min(10, int(max(1.0, 3)) * 2**retries) → 3, 6, 10, 10; the 5th run re-raises.
    with worker(app, dsn, clock=clock, start=False) as w:
        r = t.autoretry_exact.delay()
        assert run_retries(w, clock, dsn, t.autoretry_exact.name, r, 5) == [3, 6, 10, 10]
        assert w.tick() == 0  # nothing left: no sixth message
    assert t.RAN["autoretry_exact"] == 5
    with pytest.raises(t.Transient, match="attempt 4"):  # the task's own exc, as Celery raises it
        r.get(timeout=5)
    assert r.state == states.FAILURE
    assert [j["state"] for j in jobs(dsn)] == ["done"] * 4 + ["dead"]


def test_autoretry_full_jitter_draws_from_randrange_of_the_cap(
    app: Any, dsn: str, clock: FrozenClock, monkeypatch: Any
) -> None:
    # retry_backoff=True (factor 1), retry_jitter default True: countdown = randrange(min(600, 2**n) + 1).
    draws: list[int] = []

    def randrange(stop: int) -> int:
        draws.append(stop)
        return stop - 1 if len(draws) % 2 else 0  # the top and the bottom of each range

    monkeypatch.setattr(celery.utils.time.random, "randrange", randrange)
    with worker(app, dsn, clock=clock, start=False) as w:
        r = t.autoretry_jitter.delay()
        countdowns = run_retries(w, clock, dsn, t.autoretry_jitter.name, r, 7)
    # cap + 1 for caps 1..64 (Celery draws on the 7th run too, before retry() refuses)
    assert draws == [2, 3, 5, 9, 17, 33, 65]
    assert countdowns == [1, 0, 4, 0, 16, 0]
    assert t.RAN["autoretry_jitter"] == 7  # max_retries=6: six retries, then the exception
    with pytest.raises(t.Transient):
        r.get(timeout=5)


def test_self_retry_uses_its_countdown_and_reraises_exc_after_max_retries(
    app: Any, dsn: str, clock: FrozenClock
) -> None:
    with worker(app, dsn, clock=clock, start=False) as w:
        r = t.manual_retry.apply_async(headers={"x_tenant": "acme"})
        assert run_retries(w, clock, dsn, t.manual_retry.name, r, 3) == [7, 7]
    with pytest.raises(t.Transient, match="try 2"):
        r.get(timeout=5)
    retried = jobs(dsn, t.manual_retry.name)[1]
    h = headers_of(retried)
    # Celery's retry message: same id, parent = the task itself, custom headers carried along.
    assert (h["root_id"], h["parent_id"], h["x_tenant"]) == (r.id, r.id, "acme")


def test_self_retry_can_end_in_success(app: Any, dsn: str, clock: FrozenClock) -> None:
    with worker(app, dsn, clock=clock, start=False) as w:
        r = t.manual_retry.delay(succeed_at=1)
        assert run_retries(w, clock, dsn, t.manual_retry.name, r, 3) == [7]
    assert r.get(timeout=5) == "ok after 1"
    assert [j["state"] for j in jobs(dsn)] == ["done", "done"]


def test_retry_without_exc_uses_default_delay_then_raises_max_retries_exceeded(
    app: Any, dsn: str, clock: FrozenClock
) -> None:
    with worker(app, dsn, clock=clock, start=False) as w:
        r = t.retry_without_exc.delay()
        assert run_retries(w, clock, dsn, t.retry_without_exc.name, r, 2) == [5]
    with pytest.raises(MaxRetriesExceededError):
        r.get(timeout=5)
    assert t.RAN["retry_without_exc"] == 2
