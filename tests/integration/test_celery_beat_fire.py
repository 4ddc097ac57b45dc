"""Celery beat entries firing through the engine's ``Scheduler.tick`` with a frozen clock.

Each occurrence must become exactly one ordinary Celery message row (task name, args, kwargs,
queue, priority, beat's ``celery_beat_task`` header, and the occurrence headers the task reads
from ``self.request``), including after an outage: ``skip`` (the default, beat's behaviour)
sends one message, ``ujobs_catch_up="all"`` every missed one, bounded per round; an occurrence
sent twice (a leader that died between sending and recording the fire) is one row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from apps import celery_beat_app as b
from apps.celery_harness import body_of, bound, headers_of, jobs, worker
from celery_compat.beat.entries import (
    convert_app,
    engine_task_name,
    occurrence_task_id,
    periodic_tasks_for_app,
    send_occurrence,
)
from ujobs_bridge import FrozenClock
from ujobs_bridge._internal.scheduling.scheduler import Scheduler
from ujobs_bridge._internal.scheduling.task import Occurrence, PeriodicTask

Db = psycopg.Connection[Any]


def at(day: int, hour: int, minute: int = 0, second: int = 0, us: int = 0) -> datetime:
    return datetime(2026, 1, day, hour, minute, second, us, tzinfo=UTC)


@pytest.fixture
def app(dsn: str, db: Db) -> Iterator[Any]:
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    with bound(b.app, dsn):
        yield b.app


@pytest.fixture
def make(dsn: str, app: Any) -> Iterator[Callable[..., Scheduler]]:
    made: list[Scheduler] = []

    def build(entries: list[str], clock: FrozenClock) -> Scheduler:
        wanted = {engine_task_name(e) for e in entries}
        tasks = {p.name: p for p in periodic_tasks_for_app(app) if p.name in wanted}
        assert set(tasks) == wanted
        s = Scheduler(dsn, tasks, clock=clock, holder=f"beat-{len(made)}")
        made.append(s)
        return s

    yield build
    for s in made:
        s.stop()


def sent(dsn: str, task: str = "beat.stamp") -> list[dict[str, Any]]:
    return jobs(dsn, task)


def occurrences(rows: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    return [(headers_of(r)["ujobs_occurrence"], headers_of(r)["ujobs_catch_up"]) for r in rows]


def test_an_entry_fires_one_celery_message_per_occurrence(
    make: Callable[..., Scheduler], dsn: str
) -> None:
    clock = FrozenClock(at(1, 2, 0))
    s = make(["nightly-report"], clock)
    assert s.tick() == 0 and sent(dsn) == []
    clock.set(at(1, 2, 30, 0, 200_000))
    assert s.tick() == 1
    clock.advance(timedelta(seconds=1))
    assert s.tick() == 0  # the same occurrence is never sent twice
    [row] = sent(dsn)
    h = headers_of(row)
    assert (row["name"], row["queue"], row["priority"]) == ("beat.stamp", "reports", 5)
    assert (body_of(row)["args"], body_of(row)["kwargs"]) == (["nightly"], {"extra": 1})
    assert h["task"] == "beat.stamp" and h["id"] == occurrence_task_id(
        "nightly-report", at(1, 2, 30)
    )
    assert (h["ujobs_occurrence"], h["ujobs_catch_up"]) == ("2026-01-01T02:30:00+00:00", False)
    assert (h["celery_beat_task"], h["origin"]) == (True, "beat")  # beat's header, the entry's too
    assert "ujobs_catch_up" not in row["input"]["properties"]

    clock.set(at(2, 2, 30, 0, 100_000))
    assert s.tick() == 1
    assert occurrences(sent(dsn))[1] == ("2026-01-02T02:30:00+00:00", False)


def test_the_task_reads_its_occurrence_from_self_request(
    make: Callable[..., Scheduler], dsn: str, app: Any
) -> None:
    clock = FrozenClock(at(1, 2, 0))
    s = make(["nightly-report"], clock)
    s.tick()
    clock.set(at(1, 2, 30, 0, 200_000))
    assert s.tick() == 1
    task_id = occurrence_task_id("nightly-report", at(1, 2, 30))
    with worker(app, dsn, queues=("reports",), start=False) as w:
        assert w.tick() == 1
    got = app.AsyncResult(task_id).get(timeout=10)
    assert got["label"] == "nightly" and got["extra"] == 1 and got["id"] == task_id
    assert (got["occurrence"], got["catch_up"], got["beat"]) == (
        "2026-01-01T02:30:00+00:00",
        False,
        True,
    )
    assert got["headers"]["ujobs_occurrence"] == "2026-01-01T02:30:00+00:00"


def test_after_an_outage_skip_sends_exactly_one_message_like_beat(
    make: Callable[..., Scheduler], dsn: str
) -> None:
    clock = FrozenClock(at(1, 2, 0))
    s = make(["nightly-report"], clock)
    s.tick()
    clock.set(at(1, 2, 30, 0, 200_000))
    assert s.tick() == 1
    clock.set(at(4, 5, 0))  # down for three days: Jan 2, 3 and 4 at 02:30 missed
    assert [s.tick() for _ in range(3)] == [1, 0, 0]
    assert occurrences(sent(dsn)) == [
        ("2026-01-01T02:30:00+00:00", False),
        ("2026-01-04T02:30:00+00:00", True),  # the latest missed, flagged as a catch-up
    ]


def test_after_an_outage_all_sends_every_missed_one_bounded_per_round(
    make: Callable[..., Scheduler], dsn: str
) -> None:
    clock = FrozenClock(at(1, 12, 0, 30))
    s = make(["minutely-all"], clock)
    assert s.tick() == 0
    clock.set(at(1, 12, 1, 0, 200_000))
    assert s.tick() == 1
    clock.set(at(1, 15, 1, 30))  # three hours down: 12:02 .. 15:01 missed (180 occurrences)
    assert [s.tick() for _ in range(5)] == [50, 50, 50, 30, 0]  # ujobs_max_catch_up=50 a round
    rows = sent(dsn)
    got = occurrences(rows)
    expected = [at(1, 12, 1) + timedelta(minutes=k) for k in range(181)]
    assert [o for o, _ in got] == [e.isoformat() for e in expected]
    assert [flag for _, flag in got] == [False] + [True] * 180
    assert len({headers_of(r)["id"] for r in rows}) == 181
    assert {body_of(r)["args"][0] for r in rows} == {"minutely"}


def test_a_refired_occurrence_is_absorbed_by_the_celery_ledger(
    make: Callable[..., Scheduler], dsn: str, app: Any, db: Db
) -> None:
    """A leader that sent the message and died before recording the fire: its successor fires
    the same occurrence, and the task id derived from it makes the second send a no-op."""
    entry = next(c.entry for c in convert_app(app) if c.name == "nightly-report")
    assert entry is not None
    clock = FrozenClock(at(1, 2, 0))
    s = make(["nightly-report"], clock)
    s.tick()
    send_occurrence(app, entry, Occurrence(engine_task_name("nightly-report"), at(1, 2, 30), False))
    assert len(sent(dsn)) == 1
    clock.set(at(1, 2, 30, 0, 200_000))
    assert s.tick() == 1  # the fire is recorded now ...
    assert len(sent(dsn)) == 1  # ... and no second message exists
    fired = db.execute(
        "select count(*) from x_scheduler_fires where task = %s", ("beat:nightly-report",)
    ).fetchone()
    assert fired == (1,)


def test_an_unregistered_task_is_sent_by_name(make: Callable[..., Scheduler], dsn: str) -> None:
    clock = FrozenClock(at(1, 3, 59, 59))
    s = make(["cleanup-elsewhere"], clock)
    s.tick()
    clock.set(at(1, 4, 0, 0, 100_000))
    assert s.tick() == 1
    [row] = sent(dsn, "elsewhere.cleanup")
    assert (row["queue"], body_of(row)["args"], body_of(row)["kwargs"]) == (
        "celery",
        [],
        {"older_than_days": 30},
    )
    h = headers_of(row)
    assert h["ujobs_occurrence"] == "2026-01-01T04:00:00+00:00"
    # options={"expires": 600}: Celery's own meaning, 600 s from the send (app.now(), real time)
    expires = datetime.fromisoformat(h["expires"]) - row["created_at"]
    assert timedelta(seconds=590) < expires < timedelta(seconds=610)


def test_periodic_tasks_carry_the_policy_from_options(app: Any) -> None:
    tasks: dict[str, PeriodicTask] = {p.name: p for p in periodic_tasks_for_app(app)}
    assert (tasks["beat:minutely-all"].catch_up, tasks["beat:minutely-all"].max_catch_up) == (
        "all",
        50,
    )
    assert tasks["beat:nightly-report"].catch_up == "skip"
    assert "AND" in tasks["beat:first-monday"].schedule.describe()
