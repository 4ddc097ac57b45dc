"""Celery beat schedules converted for the engine's scheduler, equal to Celery's own arithmetic,
and ``ujobs-bridge beat convert``. (Entries firing through the scheduler: test_celery_beat_fire.py.)

Equality is checked against Celery itself: for each crontab, 300 consecutive fire times come
from Celery's ``remaining_estimate`` (with ``nowfun`` pinned to the last run) and are confirmed
by ``is_due`` one second before (not due) and at (due) each; the engine schedule must produce the
same instants. The command's output and exit codes are asserted as a user sees them.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab, schedule, solar
from click.testing import CliRunner

from apps import celery_beat_app as b
from celery_compat import Celery
from celery_compat.beat.convert import Unmappable, convert_schedule
from celery_compat.beat.entries import convert_app, engine_task_name, periodic_tasks_for_app
from conftest import TESTS_DIR
from ujobs_bridge._internal.cli import cli
from ujobs_bridge._internal.scheduling.cron import CronSchedule
from ujobs_bridge.errors import ConfigError

START = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)  # off a boundary, like beat's first check

# Celery's crontab fields, the cron expression each must become, and its day_or.
TABLE: list[tuple[dict[str, Any], str, bool]] = [
    ({"minute": 0}, "0 * * * *", True),
    ({"minute": "*/15", "hour": "9-17", "day_of_week": "mon-fri"}, "*/15 9-17 * * 1-5", True),
    ({"minute": 0, "hour": 0, "day_of_month": "1-7", "day_of_week": 1}, "0 0 1-7 * 1", False),
    ({"minute": 30, "hour": "*/4"}, "30 */4 * * *", True),
    ({"minute": 0, "hour": 3, "day_of_month": 1, "month_of_year": "*/3"}, "0 3 1 */3 *", True),
    ({"minute": 5, "hour": 1, "day_of_week": "*/2"}, "5 1 * * */2", True),
    ({"minute": [0, 30], "hour": [8, 20]}, "0,30 8,20 * * *", True),
    ({"minute": 0, "hour": 0, "day_of_month": 31}, "0 0 31 * *", True),
]


def app_in(tz: str) -> Any:
    app = Celery(f"beat-{tz}")
    app.conf.timezone = tz
    return app


def celery_fires(c: Any, start: datetime, n: int) -> list[datetime]:
    """``n`` consecutive fire times by Celery's own API: from the last run, ``remaining_estimate``
    with "now" at that run gives the next; ``is_due`` agrees one second before and at it."""
    now = [start]
    c.nowfun = lambda: now[0]
    out: list[datetime] = []
    last = start
    for _ in range(n):
        now[0] = last
        nxt = last + c.remaining_estimate(last)
        now[0] = nxt - timedelta(seconds=1)
        assert not c.is_due(last).is_due
        now[0] = nxt
        assert c.is_due(last).is_due
        out.append(nxt.astimezone(UTC))
        last = nxt
    return out


def engine_fires(s: Any, start: datetime, n: int) -> list[datetime]:
    out: list[datetime] = []
    last = start
    for _ in range(n):
        last = s.next_after(last)
        out.append(last)
    return out


# ---------------------------------------------------------------------------------- conversion


@pytest.mark.parametrize(("fields", "cron", "day_or"), TABLE, ids=[t[1] for t in TABLE])
def test_crontab_converts_to_the_cron_celery_fires_on(
    fields: dict[str, Any], cron: str, day_or: bool
) -> None:
    c = crontab(**fields)
    mapped = convert_schedule(c, app_in("UTC"))
    assert (mapped.kind, mapped.cron, mapped.day_or, mapped.tz) == ("cron", cron, day_or, "UTC")
    assert engine_fires(mapped.schedule, START, 300) == celery_fires(c, START, 300)


def test_without_the_day_and_the_first_monday_would_fire_on_other_days() -> None:
    """The check above can fail: croniter's default OR fires on days 1-7 and on every Monday."""
    c = crontab(0, 0, day_of_month="1-7", day_of_week=1)
    celery = celery_fires(c, START, 24)
    assert {d.day for d in celery} <= set(range(1, 8))
    assert {d.weekday() for d in celery} == {0}
    assert engine_fires(CronSchedule("0 0 1-7 * 1", day_or=True), START, 24) != celery


class BerlinCrontab(crontab):  # type: ignore[misc]
    """A crontab that carries its own zone, like django-celery-beat's per-row timezone."""

    @property
    def tz(self) -> Any:
        return ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("make", "app_tz", "zone"),
    [
        (
            lambda: crontab(minute=0, hour=9, day_of_week="mon-fri"),
            "America/New_York",
            "America/New_York",
        ),
        (lambda: crontab(minute=15, hour="6,18", day_of_month="1-10"), "Asia/Tokyo", "Asia/Tokyo"),
        (lambda: BerlinCrontab(minute=45, hour=7), "UTC", "Europe/Berlin"),
    ],
    ids=["app-timezone-new-york", "app-timezone-tokyo", "crontab-own-tz"],
)
def test_crontab_in_a_time_zone_fires_with_celery_across_dst(
    make: Callable[[], Any], app_tz: str, zone: str
) -> None:
    c = make()
    mapped = convert_schedule(c, app_in(app_tz))
    assert mapped.tz == zone
    assert engine_fires(mapped.schedule, START, 300) == celery_fires(c, START, 300)


def test_dst_gap_is_a_deliberate_difference_pinned_here() -> None:
    """02:30 on Europe/Berlin's spring-forward day does not exist. Celery computes 02:30+01:00
    (01:30 UTC, 03:30 CEST); the engine fires at the end of the gap (03:00 CEST, 01:00 UTC),
    its rule for every gap time. ``beat convert`` says so in the entry's notes."""
    c = crontab(minute=30, hour=2)
    mapped = convert_schedule(c, app_in("Europe/Berlin"))
    day_before = datetime(2026, 3, 28, 12, tzinfo=UTC)
    assert celery_fires(c, day_before, 1) == [datetime(2026, 3, 29, 1, 30, tzinfo=UTC)]
    assert engine_fires(mapped.schedule, day_before, 1) == [datetime(2026, 3, 29, 1, 0, tzinfo=UTC)]
    assert any("spring-forward" in n for n in mapped.notes)
    assert not convert_schedule(crontab(minute=30, hour=2), app_in("UTC")).notes


@pytest.mark.parametrize(
    ("value", "every"),
    [
        (7, timedelta(seconds=7)),
        (timedelta(minutes=45), timedelta(minutes=45)),
        (schedule(run_every=timedelta(hours=1)), timedelta(hours=1)),
        (2.5, timedelta(seconds=2.5)),
    ],
    ids=["7s", "45min", "schedule-1h", "2.5s"],
)
def test_intervals_map_to_the_interval_trigger(value: Any, every: timedelta) -> None:
    app = app_in("UTC")
    mapped = convert_schedule(value, app)
    assert (mapped.kind, mapped.every, mapped.cron) == ("interval", every, None)
    fires = engine_fires(mapped.schedule, START, 50)
    assert {b - a for a, b in itertools.pairwise(fires)} == {every}
    s = schedule(value) if not isinstance(value, schedule) else value
    s.app = app
    s.nowfun = lambda: START
    assert s.remaining_estimate(START) == every  # Celery's own length of the interval


@pytest.fixture
def ephem(monkeypatch: pytest.MonkeyPatch) -> None:
    """``solar`` needs ephem (``celery[solar]``) to be built; the conversion never asks it for a
    time, so an Observer stand-in lets Celery's real constructor run."""
    stub = types.ModuleType("ephem")
    stub.Observer = type("Observer", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ephem", stub)


def test_solar_is_refused_with_the_reason(ephem: None) -> None:
    with pytest.raises(Unmappable) as caught:
        convert_schedule(solar("sunset", 52.52, 13.40), app_in("UTC"))
    assert "solar event" in caught.value.reason and "no cron or interval" in caught.value.reason


def _solar_app() -> Any:
    app = Celery("beat-solar")
    app.conf.beat_schedule = {
        "at sunset": {"task": "lights.on", "schedule": solar("sunset", 52.52, 13.40)},
        "hourly": {"task": "lights.check", "schedule": crontab(minute=0)},
        "bad-policy": {"task": "x", "schedule": 60, "options": {"ujobs_catch_up": "sometimes"}},
    }
    return app


def test_an_app_with_an_unmappable_entry_is_refused_unless_told_to_leave_it_out(
    ephem: None,
) -> None:
    app = _solar_app()
    with pytest.raises(ConfigError) as caught:
        periodic_tasks_for_app(app)
    assert "'at sunset'" in caught.value.message and "'bad-policy'" in caught.value.message
    assert "'sometimes' is not a policy" in caught.value.message
    kept = periodic_tasks_for_app(app, strict=False)
    assert [p.name for p in kept] == ["beat:hourly"]


def test_entries_from_add_periodic_task_in_configure_and_finalize_handlers_are_read() -> None:
    by_name = {c.name: c for c in convert_app(b.app)}
    assert set(by_name) == {
        "stamp every 7s",
        "nightly-report",
        "first-monday",
        "minutely-all",
        "cleanup-elsewhere",
        "every 45 min",
        "quarter-hourly",
    }
    assert by_name["every 45 min"].as_dict()["every_s"] == 2700.0  # on_after_configure
    assert by_name["quarter-hourly"].as_dict()["cron"] == "*/15 * * * *"  # on_after_finalize
    assert all(c.reason is None for c in by_name.values())


def test_a_starting_deadline_beat_would_apply_is_named_in_the_notes() -> None:
    app = Celery("beat-deadline")
    app.conf.beat_cron_starting_deadline = 600
    app.conf.beat_schedule = {
        "hourly": {"task": "t", "schedule": crontab(minute=0)},
        "hourly-all": {
            "task": "t",
            "schedule": crontab(minute=0),
            "options": {"ujobs_catch_up": "all"},
        },
    }
    notes = {c.name: c.as_dict()["notes"] for c in convert_app(app)}
    assert any("beat_cron_starting_deadline=600 is not applied" in n for n in notes["hourly"])
    assert notes["hourly-all"] == []


def test_engine_names_are_safe_stable_and_distinct() -> None:
    spaced = engine_task_name("every 45 min")
    assert spaced == engine_task_name("every 45 min")
    assert spaced.startswith("beat:every-45-min-") and " " not in spaced
    assert engine_task_name("every-45-min") == "beat:every-45-min" != spaced
    assert len(engine_task_name("x" * 500)) <= 200


# ---------------------------------------------------------------------------------- beat convert


def test_beat_convert_json_from_the_real_command_line() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ujobs_bridge",
            "beat",
            "convert",
            "-A",
            "apps.celery_beat_app",
            "--json",
        ],
        cwd=TESTS_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    first = rows["first-monday"]
    assert (first["cron"], first["day_or"], first["tz"], first["catch_up"]) == (
        "0 0 1-7 * 1",
        False,
        "UTC",
        "skip",
    )
    assert first["schedule"] == "<crontab: 0 0 1-7 * 1 (m/h/dM/MY/d)>"
    assert first["next"] is not None and first["ok"] is True
    assert (rows["minutely-all"]["catch_up"], rows["minutely-all"]["max_catch_up"]) == ("all", 50)
    seven = rows["stamp every 7s"]
    assert (seven["kind"], seven["every_s"], seven["cron"]) == ("interval", 7.0, None)
    assert rows["nightly-report"]["queue"] == "reports"


def test_beat_convert_says_why_and_strict_fails(
    ephem: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "beat_solar_proj.py").write_text(
        "from celery.schedules import crontab, solar\nfrom celery_compat import Celery\n"
        "app = Celery('proj')\napp.conf.beat_schedule = {\n"
        "    'at sunset': {'task': 'lights.on', 'schedule': solar('sunset', 52.52, 13.40)},\n"
        "    'hourly': {'task': 'lights.check', 'schedule': crontab(minute=0)},\n}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = CliRunner()
    result = runner.invoke(cli, ["beat", "convert", "-A", "beat_solar_proj", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["at sunset"]["ok"] is False and "solar event" in rows["at sunset"]["reason"]
    assert rows["at sunset"]["schedule"].startswith("<solar: sunset")
    assert rows["hourly"]["ok"] is True
    strict = runner.invoke(cli, ["beat", "convert", "-A", "beat_solar_proj", "--strict"])
    assert strict.exit_code == 1
    assert "cannot map 'at sunset': " in strict.stdout and "1 entry cannot map" in strict.stderr


def test_beat_convert_without_a_celery_app_exits_2_with_a_hint() -> None:
    result = CliRunner().invoke(cli, ["beat", "convert", "-A", "apps.sched_tasks"])
    assert result.exit_code == 2
    assert "holds no Celery app" in result.stderr and "hint:" in result.stderr
