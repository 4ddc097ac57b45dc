"""Three real ``ujobs-bridge scheduler`` processes racing for one lease (2 s), with the leader
paused (SIGSTOP) past its lease and resumed: every (task, occurrence) is enqueued exactly once.

Why it exists: leadership is only an optimisation; the rule against double fire is the unique
(task, occurrence) fire row written in the same transaction as the jobs. A paused leader that
wakes up mid-round must find its occurrences taken, then notice it lost the lease and stand
down. ``race-all`` (``tests/apps/sched_tasks.py``) fires every second with ``catch_up="all"``
and NO idempotency key, so only the fire ledger stands between the racers and a duplicate job,
and the fired seconds must have no gap. Outcomes are awaited with ``wait_for``, never a sleep.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import CliProc

from apps.sched_tasks import report
from conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
Db = psycopg.Connection[Any]


@pytest.fixture
def sdb(db: Db) -> Db:
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    return db


@pytest.fixture
def schedulers(dsn: str, sdb: Db, tmp_path: Path) -> Iterator[Callable[..., CliProc]]:
    started: list[CliProc] = []

    def start(faults: str = "") -> CliProc:
        log = tmp_path / f"scheduler{len(started)}.log"
        args = [
            "scheduler",
            "-A",
            "apps.sched_tasks",
            "--no-purge",
            "--no-outbox",
            "--lease",
            "2",
            "--interval",
            "0.25",
            "--dsn",
            dsn,
        ]
        proc = CliProc(args, log, faults=faults)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(
            f"--- scheduler {proc.pid} (exit {proc.proc.returncode}) ---\n{proc.output()[-3000:]}"
        )


def leader(db: Db) -> tuple[int, int, bool] | None:
    """(pid of the holder, term, live) from the lease row; holders are host:pid:random."""
    row = db.execute("select holder, term, expires_at >= now() from x_scheduler_leader").fetchone()
    return None if row is None else (int(row[0].split(":")[-2]), int(row[1]), bool(row[2]))


def fire_count(db: Db) -> int:
    row = db.execute("select count(*) from x_scheduler_fires where task = 'race-all'").fetchone()
    assert row is not None
    return int(row[0])


def live_leader_other_than(db: Db, pid: int, term: int) -> bool:
    info = leader(db)
    return info is not None and info[0] != pid and info[1] > term and info[2]


def assert_each_occurrence_enqueued_once(db: Db) -> None:
    for task in ("race-all", "race-skip"):
        jobs = db.execute(
            "select count(*), count(distinct input->'kwargs'->>'occurrence') from x_jobs"
            " where name = %s and (idempotency_key is null) = (%s = 'race-all')",
            (report.name, task),
        ).fetchone()
        ledger = db.execute(
            "select count(*), count(distinct occurrence_at) from x_scheduler_fires where task = %s",
            (task,),
        ).fetchone()
        assert jobs is not None and ledger is not None
        assert jobs[0] == jobs[1] > 0, (task, jobs)
        assert ledger[0] == ledger[1] == jobs[0], (task, ledger, jobs)
    # every fire row's jobs exist and carry its occurrence
    orphans = db.execute(
        "select count(*) from x_scheduler_fires as f"
        " where not exists (select 1 from x_jobs as j where j.id = any(f.job_ids)"
        "   and (j.input->'kwargs'->>'occurrence')::timestamptz = f.occurrence_at)"
    ).fetchone()
    assert orphans == (0,)
    # catch_up="all": the seconds fired have no gap, whoever was leading
    seconds = [
        r[0]
        for r in db.execute(
            "select occurrence_at from x_scheduler_fires where task = 'race-all' order by occurrence_at"
        ).fetchall()
    ]
    gaps = [(a, b) for a, b in itertools.pairwise(seconds) if b - a != timedelta(seconds=1)]
    assert not gaps, gaps[:5]


def stop_all(procs: list[CliProc]) -> None:
    for p in procs:
        p.term()
    for p in procs:
        assert p.wait(timeout=20) == 0, p.output()[-2000:]


def test_three_schedulers_one_paused_past_its_lease_fire_each_occurrence_once(
    schedulers: Callable[..., CliProc], sdb: Db
) -> None:
    procs = [schedulers() for _ in range(3)]
    by_pid = {p.pid: p for p in procs}
    wait_for(lambda: fire_count(sdb) >= 3, timeout=30, what="the first fires")
    info = leader(sdb)
    assert info is not None and info[0] in by_pid
    paused_pid, paused_term, _ = info
    paused = by_pid[paused_pid]
    lost_before = paused.output().count("lost term")

    paused.pause()
    wait_for(
        lambda: live_leader_other_than(sdb, paused_pid, paused_term),
        timeout=20,
        what="a new leader",
    )
    after_takeover = fire_count(sdb)
    wait_for(
        lambda: fire_count(sdb) >= after_takeover + 3, timeout=20, what="the new leader firing"
    )

    paused.resume()  # wakes up believing it leads, possibly mid-round
    wait_for(
        lambda: paused.output().count("lost term") > lost_before,
        timeout=20,
        what="the paused leader to demote",
    )
    now_leading = leader(sdb)
    assert now_leading is not None and now_leading[1] > paused_term  # terms only go up
    settled = fire_count(sdb)
    wait_for(lambda: fire_count(sdb) >= settled + 2, timeout=20, what="fires after the resume")

    stop_all(procs)
    assert_each_occurrence_enqueued_once(sdb)


def test_a_leader_paused_right_after_it_acquired_stands_down_when_resumed(
    schedulers: Callable[..., CliProc], sdb: Db
) -> None:
    first = schedulers(faults="leader.after_acquire=pause")
    wait_for(first.stopped, timeout=30, what="the first leader to pause itself after acquiring")
    info = leader(sdb)
    assert info is not None and info[0] == first.pid
    others = [schedulers(), schedulers()]
    wait_for(
        lambda: live_leader_other_than(sdb, first.pid, info[1]), timeout=20, what="a new leader"
    )
    wait_for(lambda: fire_count(sdb) >= 3, timeout=20, what="the new leader firing")

    first.resume()
    wait_for(lambda: "lost term" in first.output(), timeout=20, what="the stale leader to demote")
    holder = leader(sdb)
    assert holder is not None and holder[0] != first.pid
    settled = fire_count(sdb)
    wait_for(lambda: fire_count(sdb) >= settled + 2, timeout=20, what="fires after the resume")

    stop_all([first, *others])
    assert_each_occurrence_enqueued_once(sdb)


def test_a_leader_paused_before_a_fire_finds_it_taken_when_it_wakes(
    schedulers: Callable[..., CliProc], sdb: Db
) -> None:
    """The sharpest race: the stale leader has an occurrence planned and fires it AFTER the new
    leader already did. The ledger absorbs it (its ``duplicates`` count), no second job appears.
    The pause is before a fire of ``race-all`` (catch-up all: the new leader fires every missed
    second, the planned one included); one of ``race-skip`` would be a missed occurrence the new
    leader skips, so the stale fire of it would land alone, once, and absorb nothing."""
    first = schedulers(faults="scheduler.before_fire.race-all=pause@3")
    wait_for(first.stopped, timeout=30, what="the leader to pause before its third race-all fire")
    paused_at = fire_count(sdb)
    info = leader(sdb)
    assert info is not None and info[0] == first.pid
    others = [schedulers(), schedulers()]
    wait_for(
        lambda: live_leader_other_than(sdb, first.pid, info[1]), timeout=20, what="a new leader"
    )
    wait_for(
        lambda: fire_count(sdb) >= paused_at + 3,
        timeout=20,
        what="the planned occurrence fired by the new leader",
    )

    first.resume()  # it goes on with the fire it had planned
    wait_for(lambda: "lost term" in first.output(), timeout=20, what="the stale leader to demote")
    stop_all([first, *others])
    absorbed = re.search(r"duplicates=(\d+)", first.output())
    assert absorbed is not None, first.output()[-2000:]
    # The stale fire is absorbed by the ledger (duplicates >= 1) -- unless the SIGSTOP froze
    # another thread of that process mid-transaction, in which case the server ends the session
    # after the lease (idle_in_transaction_session_timeout) and the stale fire never lands.
    # Either way no occurrence is enqueued twice, which is what is asserted next.
    out = first.output()
    killed = any(
        sign in out
        for sign in (
            "server closed the connection",
            "idle-in-transaction timeout",
            "IdleInTransactionSessionTimeout",
            "terminating connection",
        )
    )
    assert int(absorbed.group(1)) >= 1 or killed, first.output()[-2000:]
    assert_each_occurrence_enqueued_once(sdb)
