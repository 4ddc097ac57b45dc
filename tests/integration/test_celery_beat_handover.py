"""Beat hand-over: a REAL ``celery beat`` running a celery_compat app, then ``ujobs-bridge
scheduler -A`` beside it, then beat stopped: each occurrence is one message, and none is missing.

Why it exists: the cutover promises "no gap, no double fire" when the bridge scheduler takes
over beat (docs/how-to/beat-handover.md). ``celery beat -S celery_compat.beat.scheduler:BeatScheduler`` runs Celery's beat
with ``BeatScheduler`` (plain ``celery beat`` on a celery_compat app is the bridge scheduler), which sends
each occurrence under the id the bridge scheduler uses (``occurrence_task_id``), on the same
anchored 1-second grid, so the Celery ledger keeps one message per occurrence while both run.
The end-to-end test waits on conditions (``wait_for``), never sleeps for an outcome; the others
drive ``BeatScheduler.tick`` with a frozen ``app.now``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import celery
import psycopg
import pytest
from cli_proc import CliProc

from apps import celery_handover_app as h
from apps.celery_harness import body_of, bound, frozen_app_clock, headers_of, jobs
from celery_compat import Celery
from celery_compat.beat.entries import (
    convert_app,
    engine_task_name,
    occurrence_task_id,
    send_occurrence,
)
from celery_compat.beat.scheduler import BeatScheduler
from conftest import TESTS_DIR, wait_for
from ujobs_bridge._internal.scheduling.task import Occurrence

Db = psycopg.Connection[Any]
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def tick_rows(dsn: str, label: str = "tick") -> list[dict[str, Any]]:
    return [r for r in jobs(dsn, "handover.tick") if body_of(r)["args"] == [label]]


def occurrence_of(row: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(headers_of(row)["ujobs_occurrence"])


# -- the default, and the occurrence mapping with a frozen now ---------------------------------


def test_celery_beat_runs_the_bridge_beat_scheduler_unless_the_app_names_one() -> None:
    assert Celery("a").conf.beat_scheduler == "celery_compat.beat.scheduler:BeatScheduler"
    chosen = Celery("b")
    chosen.conf.update(beat_scheduler="celery.beat:PersistentScheduler")
    assert chosen.conf.beat_scheduler == "celery.beat:PersistentScheduler"

    class DjangoSettings:
        CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

    django = Celery("c")
    django.config_from_object(DjangoSettings, namespace="CELERY")
    assert django.conf.beat_scheduler == "django_celery_beat.schedulers:DatabaseScheduler"
    assert celery.Celery("d").conf.beat_scheduler == "celery.beat:PersistentScheduler"


@pytest.fixture
def frozen_beat(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A ``BeatScheduler`` for the handover app, its clock frozen at T0 + 0.3 s. The app is made
    current, as in ``celery beat``: entries read back from the shelve file find it that way."""
    clock = frozen_app_clock(h.app, monkeypatch, T0 + timedelta(milliseconds=300))
    previous = celery.current_app._get_current_object()
    h.app.set_current()
    with bound(h.app, dsn):
        s = BeatScheduler(app=h.app, schedule_filename=str(tmp_path / "beat"), max_interval=1)
        try:
            yield s, clock
        finally:
            s.close()
            previous.set_current()


def run_due(s: Any) -> None:
    """Tick until beat would sleep (Celery sends at most one entry per tick)."""
    for _ in range(50):
        if s.tick() > 0:
            return
    raise AssertionError("beat kept sending")


def test_each_entry_maps_to_the_occurrence_the_bridge_scheduler_fires(frozen_beat: Any) -> None:
    beat, _ = frozen_beat
    entries = beat.schedule
    now = T0 + timedelta(seconds=59, milliseconds=900)
    interval = beat.occurrence(entries[h.TICK], now)
    assert interval == Occurrence(engine_task_name(h.TICK), T0 + timedelta(seconds=59), False)
    minutely = beat.occurrence(entries[h.MINUTELY], now)
    assert minutely is not None and minutely.at == T0 and minutely.catch_up  # 59.9 s late
    assert beat.occurrence(entries[h.MINUTELY], T0 + timedelta(minutes=1)).at == T0 + timedelta(
        minutes=1
    )
    # a new interval entry (last run = when beat started) has nothing due before the next second
    assert beat.occurrence(entries[h.TICK], T0 + timedelta(milliseconds=999)) is None


def test_beat_fires_on_the_grid_with_occurrence_ids_and_the_ledger_absorbs_a_second_send(
    frozen_beat: Any, dsn: str
) -> None:
    beat, clock = frozen_beat
    run_due(beat)
    assert tick_rows(dsn) == []
    clock.set(T0 + SECOND)
    run_due(beat)
    clock.set(T0 + timedelta(seconds=1, milliseconds=600))
    run_due(beat)
    clock.set(T0 + timedelta(seconds=4, milliseconds=200))  # beat stalled 2.6 s: skip
    run_due(beat)
    rows = tick_rows(dsn)
    assert [occurrence_of(r) for r in rows] == [T0 + SECOND, T0 + 4 * SECOND]
    assert [headers_of(r)["id"] for r in rows] == [
        occurrence_task_id(h.TICK, T0 + SECOND),
        occurrence_task_id(h.TICK, T0 + 4 * SECOND),
    ]
    assert all(headers_of(r)["celery_beat_task"] for r in rows)
    # the phase is the grid, not "1 s after the last run" (which would be 4.2 s)
    assert beat.schedule[h.TICK].last_run_at == T0 + 4 * SECOND

    clock.set(T0 + timedelta(minutes=1, milliseconds=50))
    run_due(beat)
    minutely = tick_rows(dsn, "minutely")
    assert [headers_of(r)["id"] for r in minutely] == [
        occurrence_task_id(h.MINUTELY, T0 + timedelta(minutes=1))
    ]
    assert headers_of(minutely[0])["ujobs_catch_up"] is False

    # the bridge scheduler sending an occurrence beat already sent adds nothing
    entry = next(c.entry for c in convert_app(h.app) if c.name == h.TICK)
    assert entry is not None
    send_occurrence(h.app, entry, Occurrence(h.TICK, T0 + 4 * SECOND, False))
    assert len(tick_rows(dsn)) == 3  # 1 s, 4 s, and 1 min (the grid reached it too)
    assert len({headers_of(r)["id"] for r in tick_rows(dsn)}) == 3


def test_an_interval_entry_with_catch_up_all_sends_each_grid_instant_beat_missed(
    frozen_beat: Any, dsn: str
) -> None:
    beat, clock = frozen_beat
    run_due(beat)
    clock.set(T0 + timedelta(seconds=6, milliseconds=100))  # 2 s, 4 s and 6 s are due
    run_due(beat)
    sent = [(occurrence_of(r), headers_of(r)["ujobs_catch_up"]) for r in tick_rows(dsn, "replay")]
    assert sent == [(T0 + 2 * SECOND, True), (T0 + 4 * SECOND, True), (T0 + 6 * SECOND, False)]
    assert [occurrence_of(r) for r in tick_rows(dsn)] == [T0 + 6 * SECOND]  # skip: the latest


def test_an_entry_that_does_not_convert_is_sent_by_celery_and_warned_about_once(
    dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = Celery("handover_fallback")
    app.conf.update(
        task_default_queue="handover",
        beat_schedule={
            "erratic": {"task": "handover.tick", "schedule": h.Erratic(), "args": ("x",)}
        },
    )
    caplog.set_level(logging.WARNING, logger="celery_compat.beat_scheduler")
    with bound(app, dsn):
        s = BeatScheduler(app=app, schedule_filename=str(tmp_path / "fallback"), max_interval=1)
        try:
            for _ in range(3):
                s.apply_entry(s.schedule["erratic"], producer=s.producer)
        finally:
            s.close()
    rows = tick_rows(dsn, "x")
    assert len(rows) == 3 and all("ujobs_occurrence" not in headers_of(r) for r in rows)
    warnings = [r for r in caplog.records if "fallback" in r.getMessage()]
    assert len(warnings) == 1 and "'erratic'" in warnings[0].getMessage()


# -- the real hand-over ----------------------------------------------------------------------


class BeatProc:
    """``celery -A MODULE beat`` in its own session, logging to a file, killed at teardown."""

    def __init__(self, module: str, dsn: str, tmp_path: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
        env["UJOBS_DATABASE_URL"] = dsn
        self.log = tmp_path / "celery-beat.log"
        self._out = self.log.open("w")
        # -S names the hand-over scheduler: without it, `celery beat` is the bridge scheduler
        args = ["-A", module, "beat", "-S", "celery_compat.beat.scheduler:BeatScheduler"]
        args += ["-s", str(tmp_path / "celerybeat-schedule")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", *args, "--max-interval", "1", "-l", "info"],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=TESTS_DIR,
            start_new_session=True,
        )

    def term(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=15)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._out.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def sent(self, entry: str) -> set[datetime]:
        """Occurrences of ``entry`` this beat sent (its ``beat_scheduler.sent`` log lines)."""
        pattern = re.compile(rf"beat_scheduler\.sent: {re.escape(entry)} occurrence (\S+)")
        return {datetime.fromisoformat(m) for m in pattern.findall(self.output())}


def bridge_fired(db: Db, entry: str) -> set[datetime]:
    rows = db.execute(
        "select occurrence_at from x_scheduler_fires where task = %s", (engine_task_name(entry),)
    ).fetchall()
    return {r[0] for r in rows}


def holds_lease(db: Db, pid: int) -> bool:
    row = db.execute("select holder, expires_at >= now() from x_scheduler_leader").fetchone()
    return row is not None and int(row[0].split(":")[-2]) == pid and bool(row[1])


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_stopping_celery_beat_after_the_bridge_scheduler_took_over_fires_each_occurrence_once(
    dsn: str, db: Db, tmp_path: Path
) -> None:
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    module = "apps.celery_handover_app"
    beat = BeatProc(module, dsn, tmp_path)
    bridge: CliProc | None = None
    try:
        wait_for(lambda: len(tick_rows(dsn)) >= 3, timeout=30, what="celery beat sending 3 ticks")
        args = ["scheduler", "-A", module, "--no-purge", "--no-outbox", "--lease", "2"]
        bridge = CliProc([*args, "--interval", "0.25", "--dsn", dsn], tmp_path / "bridge.log")
        wait_for(lambda: holds_lease(db, bridge.pid), timeout=30, what="the bridge lease")
        wait_for(
            lambda: len(beat.sent(h.TICK) & bridge_fired(db, h.TICK)) >= 2,
            timeout=20,
            what="2 occurrences sent by both celery beat and the bridge scheduler",
        )
        assert beat.proc.poll() is None
        assert beat.term() == 0, beat.output()[-3000:]
        last_beat = max(beat.sent(h.TICK))
        wait_for(
            lambda: len([o for o in bridge_fired(db, h.TICK) if o > last_beat]) >= 3,
            timeout=20,
            what="3 occurrences after celery beat stopped",
        )
        bridge.term()
        assert bridge.wait(timeout=20) == 0, bridge.output()[-3000:]
    except BaseException:
        print(f"--- celery beat ---\n{beat.output()[-4000:]}")
        if bridge is not None:
            print(f"--- bridge scheduler ---\n{bridge.output()[-4000:]}")
        raise
    finally:
        beat.close()
        if bridge is not None:
            bridge.close()

    rows = tick_rows(dsn)
    stored = [occurrence_of(r) for r in rows]
    assert len(stored) == len(set(stored)), "an occurrence was stored twice"
    assert [headers_of(r)["id"] for r in rows] == [occurrence_task_id(h.TICK, o) for o in stored]
    by_beat, by_bridge = beat.sent(h.TICK), bridge_fired(db, h.TICK)
    assert set(stored) == by_beat | by_bridge
    assert len(by_beat & by_bridge) >= 2  # sent twice while both ran, stored once
    seq = sorted(stored)
    assert seq[0] in by_beat - by_bridge and seq[-1] in by_bridge - by_beat
    gaps = [(a, b) for a, b in itertools.pairwise(seq) if b - a != SECOND]
    assert not gaps, gaps
    assert len(seq) >= 3 + 2 + 3
    ledger = db.execute(
        "select count(*), count(distinct task_id) from x_celery_tasks where task_id = any(%s)",
        ([headers_of(r)["id"] for r in rows],),
    ).fetchone()
    assert ledger == (len(rows), len(rows))
    # a minute boundary inside the run fires the crontab once too
    minutely = [occurrence_of(r) for r in tick_rows(dsn, "minutely")]
    assert len(minutely) == len(set(minutely))
