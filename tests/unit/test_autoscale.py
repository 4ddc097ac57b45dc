"""The autoscaler's decisions with an injected clock: grow at once to what the worker holds (at
most MAX), shrink toward MIN only after the keepalive with fewer jobs than slots, and
``update`` (the ``autoscale`` command) bringing the pool inside a new range at once. The worker
is a stand-in holding a config and a count of jobs: the decisions are what is under test; the
real pools are resized by real workers in ``test_worker_pool_flags.py``."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from ujobs_bridge._internal.worker.autoscale import Autoscaler
from ujobs_bridge._internal.worker.config import WorkerConfig
from ujobs_bridge.errors import ConfigError


class Held:
    """What the autoscaler reads from a worker and the one thing it asks of it."""

    def __init__(self, least: int, most: int) -> None:
        self.config = WorkerConfig(concurrency=least, autoscale=(most, least))
        self.jobs = 0
        self.hung_bodies: list[Any] = []
        self.sizes: list[int] = []

    def in_flight(self) -> int:
        return self.jobs

    def hung(self) -> list[Any]:
        return self.hung_bodies

    def resize(self, size: int, *, bounds: tuple[int, int] | None = None) -> str | None:
        self.config = dataclasses.replace(self.config, concurrency=size, autoscale=bounds)
        self.sizes.append(size)
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scaler(worker: Held, clock: Clock) -> Autoscaler:
    most, least = worker.config.autoscale or (0, 0)
    return Autoscaler(worker, most, least, keepalive_s=30, clock=clock)  # type: ignore[arg-type]


def test_grows_at_once_to_the_jobs_held_and_never_past_max() -> None:
    worker, clock = Held(1, 4), Clock()
    auto = scaler(worker, clock)
    worker.jobs = 3
    assert auto.tick() == 2 and worker.config.concurrency == 3
    worker.jobs = 50
    assert auto.tick() == 1 and worker.config.concurrency == 4
    assert auto.tick() == 0
    assert auto.info() == {"max": 4, "min": 1, "size": 4, "held": 50}


def test_shrinks_only_after_the_keepalive_with_fewer_jobs_than_slots() -> None:
    worker, clock = Held(1, 4), Clock()
    auto = scaler(worker, clock)
    worker.jobs = 4
    auto.tick()
    worker.jobs = 2
    clock.now += 29
    assert auto.tick() == 0  # a lull inside the keepalive: no flapping
    worker.jobs = 4
    auto.tick()  # busy again: the keepalive starts over
    worker.jobs = 0
    clock.now += 29
    assert auto.tick() == 0
    clock.now += 2
    assert auto.tick() == -3 and worker.config.concurrency == 1  # down to MIN, not below


def test_hung_bodies_are_not_work_to_grow_for() -> None:
    worker, clock = Held(1, 4), Clock()
    auto = scaler(worker, clock)
    worker.jobs = 3
    worker.hung_bodies = [SimpleNamespace(abandoned=False), SimpleNamespace(abandoned=False)]
    assert auto.tick() == 0 and auto.qty == 1
    worker.jobs = 1  # one's thread was abandoned: it holds no slot and is no longer counted
    worker.hung_bodies = [SimpleNamespace(abandoned=False), SimpleNamespace(abandoned=True)]
    assert auto.qty == 0


def test_update_moves_the_range_and_the_pool_inside_it_at_once() -> None:
    worker, clock = Held(1, 6), Clock()
    auto = scaler(worker, clock)
    worker.jobs = 6
    auto.tick()
    assert auto.update(3, None) == (3, 1) and worker.config.concurrency == 3
    assert auto.update(None, 2) == (3, 2) and worker.config.concurrency == 3
    assert auto.update("5", "4") == (5, 4)
    assert worker.config.concurrency == 4 and worker.config.autoscale == (5, 4)
    with pytest.raises(ConfigError, match="above max"):
        auto.update(2, 3)
    with pytest.raises(ConfigError):
        auto.update(0, None)
