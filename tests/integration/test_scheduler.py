"""The scheduler in-process against real Postgres, with an injected frozen clock: nothing sleeps.

``Scheduler.tick()`` is one round (renew or take the lease, read the clock once, fire what is
due); these tests drive it by hand and move a ``FrozenClock``. The lease itself always runs on
the database's clock, which is why a scheduler whose clock is ahead cannot take a live lease.
What a user sees is asserted: the jobs in ``x_jobs`` (their input says which occurrence and
whether it is a catch-up), the fire ledger, the leader row, the log, ``tasks ls``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from apps import sched_tasks
from apps.sched_tasks import report
from conftest import TESTS_DIR, wait_for
from ujobs_bridge import FrozenClock
from ujobs_bridge._internal.scheduling.leader import current
from ujobs_bridge._internal.scheduling.scheduler import Scheduler
from ujobs_bridge._internal.scheduling.task import Occurrence, PeriodicTask, task

Db = psycopg.Connection[Any]


def at(hour: int, minute: int = 0, second: int = 0, us: int = 0, *, day: int = 1) -> datetime:
    return datetime(2026, 1, day, hour, minute, second, us, tzinfo=UTC)


class SkewedClock:
    """A host whose system clock runs ``offset`` ahead: ``now()`` is off, and like the system
    clock it leaves SQL to the database (``sql_now() is None``)."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def sql_now(self) -> datetime | None:
        return None


@pytest.fixture
def sdb(db: Db) -> Db:
    """The session database with the scheduler's tables emptied too."""
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    return db


@pytest.fixture
def make(dsn: str, sdb: Db) -> Iterator[Callable[..., Scheduler]]:
    made: list[Scheduler] = []

    def build(tasks: list[PeriodicTask], clock: Any, holder: str, **kw: Any) -> Scheduler:
        s = Scheduler(dsn, {t.name: t for t in tasks}, clock=clock, holder=holder, **kw)
        made.append(s)
        return s

    yield build
    for s in made:
        s.stop()


def fires(db: Db, name: str) -> list[tuple[datetime, bool]]:
    rows = db.execute(
        "select occurrence_at, catch_up from x_scheduler_fires where task = %s order by occurrence_at",
        (name,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def jobs_of(db: Db, name: str) -> list[dict[str, Any]]:
    """The ``report`` jobs a task enqueued, in the order they were created."""
    rows = db.execute(
        "select input, idempotency_key from x_jobs where name = %s and idempotency_key like %s"
        " order by created_at, id",
        (report.name, f"{name}@%"),
    ).fetchall()
    return [r[0]["kwargs"] for r in rows]


def db_now(db: Db) -> datetime:
    row = db.execute("select now()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def test_three_hour_outage_fires_one_one_and_all_bounded_per_round(
    make: Callable[..., Scheduler], sdb: Db
) -> None:
    skip = task("outage-skip", cron="* * * * *", catch_up="skip", job=report)
    once = task("outage-once", cron="* * * * *", catch_up="run-once", job=report)
    every = task("outage-all", cron="* * * * *", catch_up="all", max_catch_up=50, job=report)
    clock = FrozenClock(at(12, 0, 30))
    s = make([skip, once, every], clock, "a")

    assert s.tick() == 0  # new tasks: no backlog, nothing due at 12:00:30
    clock.set(at(12, 1, 0, 200_000))
    assert s.tick() == 3  # each fires 12:01 on time
    for t in (skip, once, every):
        assert jobs_of(sdb, t.name) == [
            {"occurrence": "2026-01-01T12:01:00+00:00", "catch_up": False}
        ]

    clock.set(at(15, 1, 30))  # down for three hours: 12:02 .. 15:01 missed (180 occurrences)
    per_round = [s.tick() for _ in range(5)]
    assert per_round == [52, 50, 50, 30, 0]  # skip 1 + run-once 1 + all 50, then all 50, 50, 30

    latest = {"occurrence": "2026-01-01T15:01:00+00:00", "catch_up": True}
    assert jobs_of(sdb, skip.name)[1:] == [latest]  # exactly one, the LATEST missed
    assert jobs_of(sdb, once.name)[1:] == [latest]  # exactly one, flagged catch-up
    caught_up = jobs_of(sdb, every.name)[1:]
    expected = [(at(12, 2) + timedelta(minutes=k)).isoformat() for k in range(180)]
    assert [j["occurrence"] for j in caught_up] == expected  # all 180, oldest first
    assert all(j["catch_up"] for j in caught_up)
    assert [o for o, _ in fires(sdb, every.name)] == [at(12, 1)] + [
        at(12, 2) + timedelta(minutes=k) for k in range(180)
    ]
    assert fires(sdb, skip.name) == [(at(12, 1), False), (at(15, 1), True)]

    clock.set(at(15, 2, 0, 100_000))  # back to normal: the next minute is on time again
    assert s.tick() == 3
    assert jobs_of(sdb, every.name)[-1] == {
        "occurrence": "2026-01-01T15:02:00+00:00",
        "catch_up": False,
    }


def test_a_task_added_later_has_no_backlog(make: Callable[..., Scheduler], sdb: Db) -> None:
    old = task("old-hourly", cron="0 * * * *", job=report)
    clock = FrozenClock(at(9, 30))
    first = make([old], clock, "a")
    first.tick()
    first.stop()  # a redeploy three hours later adds a task
    clock.set(at(12, 30))
    new = task("new-hourly", cron="0 * * * *", catch_up="all", job=report)
    s = make([old, new], clock, "b")
    assert s.tick() == 1  # old catches up (skip: 12:00 only); new starts at 12:30 with nothing
    assert fires(sdb, "old-hourly") == [(at(12), True)]
    assert fires(sdb, "new-hourly") == []
    clock.set(at(13, 0))
    assert s.tick() == 2
    assert fires(sdb, "new-hourly") == [(at(13), False)]


def test_a_one_year_outage_is_resolved_in_under_100_schedule_calls(
    make: Callable[..., Scheduler], sdb: Db, caplog: pytest.LogCaptureFixture
) -> None:
    minutely = task("year-skip", cron="* * * * *", catch_up="skip", job=report)
    clock = FrozenClock(at(0, 0, 30))
    s = make([minutely], clock, "a")
    s.tick()
    clock.set(datetime(2027, 1, 1, 0, 0, 59, 999_999, tzinfo=UTC))
    with caplog.at_level(logging.INFO, logger="ujobs.scheduler"):
        assert s.tick() == 1
    assert jobs_of(sdb, minutely.name) == [
        {"occurrence": "2027-01-01T00:00:00+00:00", "catch_up": True}
    ]
    (line,) = [r.getMessage() for r in caplog.records if "catch_up" in r.getMessage()]
    calls = int(re.search(r"resolver calls (\d+)", line).group(1))  # type: ignore[union-attr]
    print(f"\none-year outage of '* * * * *' (525,600 missed): {calls} resolver calls")
    assert 0 < calls < 100


def test_a_scheduler_whose_clock_is_ahead_cannot_take_a_live_lease(
    make: Callable[..., Scheduler], sdb: Db
) -> None:
    every_second = task("skew-every", every=1, catch_up="all", job=report)
    now = db_now(sdb)
    a = make([every_second], FrozenClock(now), "on-time", ttl_s=30)
    ahead_frozen = make(
        [every_second], FrozenClock(now + timedelta(minutes=2)), "ahead-frozen", ttl_s=30
    )
    ahead_host = make([every_second], SkewedClock(timedelta(minutes=2)), "ahead-host", ttl_s=30)
    a.tick()
    live = current(sdb)
    assert live is not None and (live.holder, live.live) == ("on-time", True)
    for _ in range(3):
        assert ahead_frozen.tick() == 0 and ahead_host.tick() == 0
    assert not ahead_frozen.leader.is_leader and not ahead_host.leader.is_leader
    assert current(sdb) == live  # same holder, same term: nothing was taken over

    a.stop()  # resigns: now the lease is free
    wait_for(lambda: ahead_host.tick() > 0, what="the skewed scheduler to lead and fire")
    taken = current(sdb)
    assert taken is not None and taken.holder == "ahead-host" and taken.term == live.term + 1
    # A host clock two minutes ahead does not fire early: the round reads the database's clock.
    early = sdb.execute(
        "select count(*) from x_scheduler_fires where task = %s and occurrence_at > fired_at",
        (every_second.name,),
    ).fetchone()
    assert early == (0,)
    marks = sdb.execute(
        "select watermark <= now() from x_scheduler_state where task = %s", (every_second.name,)
    ).fetchone()
    assert marks == (True,)


def test_a_failing_task_keeps_its_watermark_and_the_others_still_fire(
    make: Callable[..., Scheduler], sdb: Db
) -> None:
    broken = {"on": True}

    def flaky(occ: Occurrence) -> list[Any]:
        if broken["on"]:
            raise RuntimeError("tenant list unavailable")
        return [
            report.configure(idempotency_key=occ.key).call(
                occurrence=occ.at.isoformat(), catch_up=occ.catch_up
            )
        ]

    bad = task("flaky", cron="* * * * *", catch_up="run-once", enqueue=flaky)
    good = task("steady", cron="* * * * *", job=report)
    clock = FrozenClock(at(8, 0, 30))
    s = make([bad, good], clock, "a")
    s.tick()
    clock.set(at(8, 1, 0, 100_000))
    assert s.tick() == 1 and s.counts.failed == 1
    clock.set(at(8, 2, 0, 100_000))
    assert s.tick() == 1 and s.counts.failed == 2
    assert fires(sdb, "steady") == [(at(8, 1), False), (at(8, 2), False)]
    assert fires(sdb, "flaky") == []
    broken["on"] = False  # fixed: run-once fires one flagged catch-up for 08:01 and 08:02
    clock.set(at(8, 3, 0, 100_000))
    assert s.tick() == 2
    assert jobs_of(sdb, "flaky") == [{"occurrence": "2026-01-01T08:03:00+00:00", "catch_up": True}]


def test_enqueue_in_fire_writes_through_the_fire_transaction_and_a_duplicate_rolls_it_back(
    make: Callable[..., Scheduler], sdb: Db
) -> None:
    """The scheduler hands its fire transaction's connection to the task explicitly: what the
    task writes there commits with the fire row, and a fire that turns out to be a duplicate
    takes the write back with it."""
    statuses: list[Any] = []

    def in_fire(occ: Occurrence, conn: psycopg.Connection[Any]) -> list[Any]:
        statuses.append(conn.info.transaction_status)
        report.configure(conn=conn, idempotency_key=occ.key).enqueue(
            occurrence=occ.at.isoformat(), catch_up=occ.catch_up
        )
        return []  # already written through conn

    hooked = task("in-fire", cron="0 * * * *", enqueue_in_fire=in_fire)
    sdb.execute(  # 10:00 already recorded by a leader that died before moving the watermark
        "insert into x_scheduler_fires (task, occurrence_at, catch_up, job_ids) values ('in-fire', %s, false, '{}')",
        (at(10),),
    )
    clock = FrozenClock(at(9, 0))
    s = make([hooked], clock, "a")
    assert s.tick() == 1
    assert jobs_of(sdb, "in-fire") == [
        {"occurrence": "2026-01-01T09:00:00+00:00", "catch_up": False}
    ]
    clock.set(at(10, 0, 0, 100_000))
    assert s.tick() == 0 and s.counts.duplicates == 1
    assert len(jobs_of(sdb, "in-fire")) == 1  # the duplicate fire's job was rolled back
    assert statuses == [psycopg.pq.TransactionStatus.INTRANS] * 2
    with pytest.raises(Exception, match="fire transaction"):
        hooked.requests(Occurrence("in-fire", at(11), False))  # no connection: refused, not guessed


def test_stop_waits_for_the_round_in_flight_then_gives_the_lease_back(
    make: Callable[..., Scheduler], sdb: Db
) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(occ: Occurrence) -> list[Any]:
        entered.set()
        release.wait(10)
        return [
            report.configure(idempotency_key=occ.key).call(
                occurrence=occ.at.isoformat(), catch_up=occ.catch_up
            )
        ]

    clock = FrozenClock(at(10, 0))  # exactly on an occurrence: a new task fires it at once
    s = make([task("slow", cron="0 * * * *", enqueue=slow)], clock, "a", interval_s=0.2, ttl_s=5)
    s.start()
    assert entered.wait(10)
    stopper = threading.Thread(target=s.stop)
    stopper.start()
    stopper.join(timeout=0.3)
    assert stopper.is_alive(), "stop() returned while a round was still firing"
    release.set()
    stopper.join(timeout=10)
    assert not stopper.is_alive()
    assert fires(sdb, "slow") == [(at(10), False)]  # the round finished its fire
    info = current(sdb)
    assert info is not None and info.holder == "a" and not info.live  # then resigned


def test_tasks_ls_shows_next_fire_last_occurrence_and_policy(
    dsn: str, make: Callable[..., Scheduler], sdb: Db
) -> None:
    clock = FrozenClock(at(7, 0, 0, 500_000))
    s = make([sched_tasks.race_all, sched_tasks.race_skip], clock, "a")
    s.tick()
    clock.set(at(7, 0, 5, 500_000))
    assert s.tick() == 6  # race-all: 07:00:01 .. 07:00:05; race-skip: 07:00:05 only

    def ls(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "ujobs_bridge",
                "tasks",
                "ls",
                "-A",
                "apps.sched_tasks",
                "--dsn",
                dsn,
                *extra,
            ],
            capture_output=True,
            text=True,
            cwd=TESTS_DIR,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(TESTS_DIR)},
        )

    before = datetime.now(UTC)
    out = ls("--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert sorted(rows) == ["race-all", "race-skip", "ujobs.purge.hourly"]
    race_all, race_skip, purge = rows["race-all"], rows["race-skip"], rows["ujobs.purge.hourly"]
    assert (race_all["policy"], race_all["max_catch_up"]) == ("all", 500)
    assert (
        race_all["last_occurrence"] == "2026-01-01T07:00:05+00:00"
        and race_all["last_was_catch_up"] is False
    )
    assert (
        race_skip["policy"] == "skip"
        and race_skip["last_occurrence"] == "2026-01-01T07:00:05+00:00"
    )
    assert race_all["watermark"] == "2026-01-01T07:00:05.500000+00:00"
    for row in (race_all, race_skip):  # both fire every second: the next fire is within a second
        nxt = datetime.fromisoformat(row["next"])
        assert before < nxt <= datetime.now(UTC) + timedelta(seconds=1)
    assert purge["last_occurrence"] is None and purge["policy"] == "skip"
    assert datetime.fromisoformat(purge["next"]).minute == 17  # the hourly sweep's minute

    table = ls()
    assert table.returncode == 0, table.stderr
    assert "race-all" in table.stdout and "never" in table.stdout and "all" in table.stdout
