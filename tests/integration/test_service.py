"""``Service``, the start / stop / tick shape every background loop shares
(``ujobs_bridge._internal.service``).

No database: a counting service with gates shows that start is idempotent, stop is safe before
start and twice, stop waits for the pass in flight before releasing anything, and a pass that
raises does not end the loop. Outcomes are awaited with events and ``wait_for``, never a sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg

from celery_compat.backend.listener import ResultListener
from celery_compat.worker.interrupts import Interrupter
from conftest import wait_for
from migrate.runner import DrainLoop
from ujobs_bridge._internal.outbox.relay import OutboxRelay
from ujobs_bridge._internal.scheduling.scheduler import Scheduler
from ujobs_bridge._internal.service import Service
from ujobs_bridge._internal.worker.heartbeat import Heartbeat
from ujobs_bridge._internal.worker.listener import Listener


class Counting(Service):
    def __init__(self) -> None:
        super().__init__("counting", interval_s=0.01)
        self.ticks = 0
        self.threads: set[int] = set()
        self.fail_next = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.events: list[str] = []

    def tick(self) -> int:
        self.threads.add(threading.get_ident())
        self.entered.set()
        self.release.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("one bad pass")
        self.ticks += 1
        return self.ticks

    def _on_start(self) -> None:
        self.events.append("start")

    def _on_stop(self) -> None:
        self.events.append(f"stop after {self.ticks} ticks, in flight: {not self.release.is_set()}")


def test_start_is_idempotent_and_stop_is_safe_before_start_and_twice() -> None:
    s = Counting()
    s.stop()  # never started: nothing to wait for
    assert s.events == ["stop after 0 ticks, in flight: False"] and not s.running
    s.events.clear()
    s.start()
    s.start()
    wait_for(lambda: s.ticks >= 3, what="a few passes")
    s.stop()
    s.stop()
    assert len(s.threads) == 1 and not s.running  # one loop thread, however often start was called
    assert s.events[0] == "start" and s.events.count("start") == 1


def test_stop_waits_for_the_pass_in_flight_before_releasing() -> None:
    s = Counting()
    s.release.clear()
    s.start()
    assert s.entered.wait(10)
    stopper = threading.Thread(target=s.stop)
    stopper.start()
    stopper.join(timeout=0.2)
    assert stopper.is_alive() and s.events == ["start"]  # nothing released mid-pass
    s.release.set()
    stopper.join(timeout=10)
    assert s.events == ["start", "stop after 1 ticks, in flight: False"]


def test_a_pass_that_raises_does_not_end_the_loop() -> None:
    s = Counting()
    s.fail_next = True
    s.start()
    wait_for(lambda: s.ticks >= 2, what="passes after the failing one")
    s.stop()


def test_every_background_loop_is_a_service() -> None:
    for cls in (
        Heartbeat,
        Listener,
        Scheduler,
        OutboxRelay,
        ResultListener,
        Interrupter,
        DrainLoop,
    ):
        assert issubclass(cls, Service), cls


def test_the_interrupter_starts_once_and_stops_with_its_events() -> None:
    s = Interrupter()
    s.stop()  # before start: safe
    s.start()
    s.start()
    assert s.started.is_set() and s.running
    assert s.tick() == 0  # nothing watched: nothing raised
    s.stop()
    s.stop()
    assert s.stopped.is_set() and not s.running


def test_the_result_listener_wakes_a_waiter_and_stops_idempotently(dsn: str) -> None:
    s = ResultListener(dsn)
    s.start()
    s.start()  # idempotent; LISTEN is in place when start() returns
    woken = s.watch(["some-task-id"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pg_notify('x_celery_results', 'some-task-id')")
    assert woken.wait(10)
    s.stop()
    s.stop()
    assert s.stopped.is_set() and not s.running


class EmptySource:
    kind = "redis"

    def __init__(self) -> None:
        self.queues = ["celery"]
        self.asked: list[str] = []

    def recover(self, n: int) -> list[Any]:
        self.asked.append("recover")
        return []

    def take(self, n: int) -> list[Any]:
        self.asked.append("take")
        return []

    def settle(self, items: list[Any]) -> None:
        raise AssertionError("nothing was taken")

    def remaining(self) -> int | None:
        return 0

    def idle(self, timeout: float) -> None:
        pass

    def peek(self) -> Iterator[Any]:
        return iter(())

    def close(self) -> None:
        pass


def test_the_drain_loop_ticks_one_batch_and_runs_to_the_end_on_its_own_thread(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        source = EmptySource()
        loop = DrainLoop(source, conn, None, threading.Event())  # type: ignore[arg-type]
        assert loop.tick() == 0 and source.asked == ["recover", "take"]
        loop.start()
        loop.start()
        wait_for(lambda: loop.stop_event.is_set(), what="the drain to find the queues empty")
        loop.stop()
        loop.stop()
        assert loop.stopped.is_set() and loop.error is None
        assert loop.stats.remaining == 0 and not loop.stats.stopped_by_signal


class Raising(Service):
    """Each pass raises the next error of ``errors`` (then passes quietly)."""

    def __init__(self, errors: list[BaseException], streak: int | None = None) -> None:
        super().__init__("raising", interval_s=0.0, error_streak=streak)
        self.errors = errors
        self.died: list[tuple[str, BaseException]] = []
        self.gone = threading.Event()
        self.on_died = lambda name, exc: (self.died.append((name, exc)), self.gone.set())

    def tick(self) -> None:
        if self.errors:
            raise self.errors.pop(0)

    def _on_error(self, exc: Exception) -> float:
        return 0.0


def test_a_loop_that_cannot_go_on_tells_its_owner_instead_of_dying_silently() -> None:
    exit_ = SystemExit("from a pass")
    service = Raising([RuntimeError("survived"), exit_])
    service.start()
    assert service.gone.wait(10)
    service.stop()
    assert service.died == [("raising", exit_)]


def test_unexpected_errors_in_a_row_end_a_loop_with_a_streak_but_database_errors_never_do() -> None:
    db_errors: list[BaseException] = [psycopg.OperationalError("down") for _ in range(5)]
    service = Raising([*db_errors, ValueError("1"), ValueError("2"), ValueError("3")], streak=3)
    service.start()
    assert service.gone.wait(10)
    service.stop()
    [(name, exc)] = service.died
    assert name == "raising"
    assert isinstance(exc, ValueError) and str(exc) == "3"
    survives = Raising([ValueError("a"), ValueError("b")], streak=3)  # then passes quietly
    survives.start()
    wait_for(lambda: not survives.errors, what="both errors to be raised")
    survives.stop()
    assert survives.died == []
