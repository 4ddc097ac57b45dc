"""Schedules, DST rules and catch-up arithmetic (``cron.py``) and task declaration (``task.py``).

Pure and fast: no database, frozen instants, nothing sleeps. The DST cases are pinned twice: by
name (the 2026 edges in New York and Berlin) and against a brute-force oracle that walks real time
minute by minute and applies the documented rule ("fire at the first instant the wall clock reads
the scheduled time or later") in zones with odd transitions.
"""

from __future__ import annotations

import math
import random
import re
from datetime import UTC, datetime, timedelta
from types import ModuleType
from zoneinfo import ZoneInfo

import pytest

from ujobs_bridge import job
from ujobs_bridge._internal.scheduling.cron import (
    CatchUp,
    CronSchedule,
    Fire,
    IntervalSchedule,
    Schedule,
    missed,
)
from ujobs_bridge._internal.scheduling.task import Occurrence, PeriodicTask, task, tasks_from_module
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.job import EnqueueRequest

NY, BERLIN = "America/New_York", "Europe/Berlin"
MINUTE = timedelta(minutes=1)


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def walk(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Every occurrence in (start, end], by stepping next_after (the oracle for small windows)."""
    out, t = [], schedule.next_after(start)
    while t <= end:
        out.append(t)
        t = schedule.next_after(t)
    return out


def local(instant: datetime, tz: str) -> str:
    return instant.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")


# --- catch-up after an outage -------------------------------------------------------------------

EVERY_MINUTE = CronSchedule("* * * * *")
LAST_FIRE = at(2026, 1, 1, 12, 0)  # the watermark: the scheduler decided up to here, then died
BACK = at(2026, 1, 1, 15, 0, 30)  # three hours later, mid-minute: (12:00, 15:00] holds 180


def test_three_hour_outage_skip_fires_once_the_latest() -> None:
    result = missed(EVERY_MINUTE, LAST_FIRE, BACK, "skip", 100)
    assert [(f.at, f.catch_up) for f in result.fires] == [(at(2026, 1, 1, 15, 0), True)]
    assert result.watermark == BACK and not result.more
    assert result.oldest == at(2026, 1, 1, 12, 1)
    assert result.resolver_calls < 20  # never one per missed minute (there are 180)


def test_three_hour_outage_run_once_fires_one_catch_up() -> None:
    result = missed(EVERY_MINUTE, LAST_FIRE, BACK, "run-once", 100)
    assert [(f.at, f.catch_up) for f in result.fires] == [(at(2026, 1, 1, 15, 0), True)]
    assert result.watermark == BACK


def test_three_hour_outage_all_fires_all_bounded_per_round() -> None:
    first = missed(EVERY_MINUTE, LAST_FIRE, BACK, "all", 100)
    assert len(first.fires) == 100 and first.more
    assert first.watermark == first.fires[-1].at == at(2026, 1, 1, 13, 40)
    second = missed(EVERY_MINUTE, first.watermark, BACK, "all", 100)
    assert len(second.fires) == 80 and not second.more and second.watermark == BACK
    fired = [f.at for f in first.fires + second.fires]
    assert fired == [LAST_FIRE + k * MINUTE for k in range(1, 181)]
    assert all(f.catch_up for f in first.fires + second.fires)


def test_on_time_occurrence_is_not_a_catch_up() -> None:
    now = at(2026, 1, 1, 15, 0)  # exactly on an occurrence: that one is due, not late
    skip = missed(EVERY_MINUTE, LAST_FIRE, now, "skip", 100)
    assert [(f.at, f.catch_up) for f in skip.fires] == [(now, False)]
    once = missed(EVERY_MINUTE, LAST_FIRE, now, "run-once", 100)
    assert [(f.at, f.catch_up) for f in once.fires] == [(now, True)]  # stands in for 179 missed
    every = missed(EVERY_MINUTE, LAST_FIRE, now, "all", 1000)
    assert len(every.fires) == 180 and [f.catch_up for f in every.fires[-2:]] == [True, False]


def test_grace_is_how_late_a_normal_fire_may_be_seen() -> None:
    now = at(2026, 1, 1, 15, 0, 1)
    assert missed(EVERY_MINUTE, now - 2 * MINUTE, now, "skip", grace=timedelta(0)).fires[0].catch_up
    on_time = missed(EVERY_MINUTE, now - MINUTE, now, "all", grace=timedelta(seconds=2))
    assert [(f.at, f.catch_up) for f in on_time.fires] == [(at(2026, 1, 1, 15, 0), False)]


def test_rounds_every_second_fire_each_minute_once_and_on_time() -> None:
    watermark: datetime | None = None
    fired: list[Fire] = []
    now = at(2026, 1, 1, 11, 59, 0, 300_000)
    for _ in range(5 * 60):
        now += timedelta(seconds=1)
        result = missed(EVERY_MINUTE, watermark, now, "skip", grace=timedelta(seconds=1))
        fired.extend(result.fires)
        watermark = result.watermark
    assert [f.at for f in fired] == [at(2026, 1, 1, 12, 0) + k * MINUTE for k in range(5)]
    assert not any(f.catch_up for f in fired)


def test_new_task_has_no_backlog() -> None:
    now = at(2026, 1, 1, 15, 0, 30)
    fresh = missed(EVERY_MINUTE, None, now, "all", 100)
    assert fresh.fires == () and fresh.watermark == now
    assert missed(EVERY_MINUTE, fresh.watermark, now + MINUTE, "all").fires[0].at == at(
        2026, 1, 1, 15, 1
    )
    exact = missed(EVERY_MINUTE, None, at(2026, 1, 1, 15, 0), "skip")
    assert [(f.at, f.catch_up) for f in exact.fires] == [(at(2026, 1, 1, 15, 0), False)]


def test_clock_behind_watermark_decides_nothing() -> None:
    result = missed(EVERY_MINUTE, BACK, BACK - timedelta(seconds=5), "skip")
    assert result == CatchUp((), BACK, False, None, 0)


def test_nothing_due_keeps_quiet() -> None:
    daily = CronSchedule("0 2 * * *")
    result = missed(daily, at(2026, 1, 1, 2, 0), at(2026, 1, 1, 14, 0), "skip")
    assert result.fires == () and result.watermark == at(2026, 1, 1, 14, 0)


# --- the bisection ------------------------------------------------------------------------------


def test_one_year_gap_resolver_calls_are_logarithmic() -> None:
    start = at(2026, 1, 1, 0, 0)
    counts: dict[str, int] = {}
    cases: list[tuple[str, Schedule, datetime, datetime]] = [
        ("* * * * *, now on the minute", EVERY_MINUTE, at(2027, 1, 1, 0, 0), at(2027, 1, 1)),
        (
            "* * * * *, now at :59.999999",
            EVERY_MINUTE,
            at(2027, 1, 1, 0, 0, 59, 999_999),
            at(2027, 1, 1),
        ),
        (
            "* * * * * * (seconds)",
            CronSchedule("* * * * * *"),
            at(2027, 1, 1, 0, 0, 0, 999_999),
            at(2027, 1, 1),
        ),
        (
            "0 0 1 1 * over 10 years",
            CronSchedule("0 0 1 1 *"),
            at(2035, 12, 31, 23, 59, 59),
            at(2035, 1, 1),
        ),
        (
            "every 7 s",
            IntervalSchedule(7),
            at(2027, 1, 1, 0, 0, 6, 500_000),
            at(2027, 1, 1, 0, 0, 6),
        ),
    ]
    for label, schedule, now, latest in cases:
        result = missed(schedule, start, now, "skip", 100)
        assert [f.at for f in result.fires] == [latest], label
        assert schedule.next_after(latest) > now, label
        counts[label] = result.resolver_calls
    print("\nresolver calls for skip:", counts)
    assert max(counts.values()) < 100
    assert counts["* * * * *, now at :59.999999"] < 20


def test_bisection_matches_walking() -> None:
    rng = random.Random(20260308)
    schedules: list[Schedule] = [
        CronSchedule("* * * * *"),
        CronSchedule("*/7 * * * * 3,29"),
        CronSchedule("15,45 */3 * * *", tz=NY),
        CronSchedule("0 2 * * *", tz=NY),
        CronSchedule("30 2 * * *", tz=BERLIN),
        IntervalSchedule(timedelta(seconds=97), anchor=at(2026, 3, 1, 0, 0, 13)),
        IntervalSchedule(0.25),
    ]
    edges = [at(2026, 3, 7), at(2026, 3, 28), at(2026, 10, 24), at(2026, 10, 31)]  # DST weeks
    for _ in range(300):
        schedule = rng.choice(schedules)
        start = rng.choice(edges) + timedelta(seconds=rng.uniform(0, 3 * 86400))
        span = 3600 if isinstance(schedule, IntervalSchedule) else 6 * 3600  # walking stays cheap
        now = start + timedelta(seconds=rng.uniform(0, span))
        expected = walk(schedule, start, now)
        result = missed(schedule, start, now, "skip")
        assert [f.at for f in result.fires] == expected[-1:], (schedule, start, now)


def test_bisection_stops_only_when_one_grid_step_is_left() -> None:
    # Occurrences one resolution apart, asked from every whole second: the search must not stop
    # while the bracket is exactly one step wide (the later end can be the answer).
    for expr in ["* * * * * 0,1", "* * * * * 10,11,40", "* * * * * 0-3"]:
        schedule = CronSchedule(expr)
        for second in range(60):
            now = at(2026, 1, 1, 12, 0, second)
            latest = walk(schedule, now - 2 * MINUTE, now)[-1]
            result = missed(schedule, now - timedelta(hours=2), now, "skip")
            assert [f.at for f in result.fires] == [latest], (expr, now)


# --- DST ----------------------------------------------------------------------------------------


def test_new_york_spring_forward_fires_once_at_three() -> None:
    schedule = CronSchedule("0 2 * * *", tz=NY)
    fires = walk(schedule, at(2026, 3, 6, 12), at(2026, 3, 10, 12))
    assert [local(f, NY) for f in fires] == [
        "2026-03-07 02:00 EST",
        "2026-03-08 03:00 EDT",  # 02:00 does not exist: the first instant after the gap
        "2026-03-09 02:00 EDT",
        "2026-03-10 02:00 EDT",
    ]
    # A 2:00 and a 3:00 entry meet at 03:00 EDT on that day and fire once.
    both = walk(CronSchedule("0 2,3 * * *", tz=NY), at(2026, 3, 8, 0), at(2026, 3, 8, 23))
    assert [local(f, NY) for f in both] == ["2026-03-08 03:00 EDT"]
    # Down across the gap with catch_up="all": the missed day still fires once.
    result = missed(schedule, at(2026, 3, 7, 12), at(2026, 3, 8, 12), "all")
    assert [local(f.at, NY) for f in result.fires] == ["2026-03-08 03:00 EDT"]


def test_new_york_fall_back_fires_once_at_the_first_one_thirty() -> None:
    schedule = CronSchedule("30 1 * * *", tz=NY)
    fires = walk(schedule, at(2026, 10, 31, 12), at(2026, 11, 2, 12))
    assert [local(f, NY) for f in fires] == ["2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"]
    # Asked from inside the repeated hour (01:10 EST, after the first 01:30): tomorrow.
    inside = at(2026, 11, 1, 6, 10)
    assert local(inside, NY) == "2026-11-01 01:10 EST"
    assert local(schedule.next_after(inside), NY) == "2026-11-02 01:30 EST"


def test_sub_hourly_cron_does_not_repeat_the_repeated_hour() -> None:
    fires = walk(
        CronSchedule("*/20 * * * *", tz=NY), at(2026, 11, 1, 4, 50), at(2026, 11, 1, 7, 30)
    )
    assert [local(f, NY) for f in fires] == [
        "2026-11-01 01:00 EDT",
        "2026-11-01 01:20 EDT",
        "2026-11-01 01:40 EDT",
        "2026-11-01 02:00 EST",  # 01:00-01:40 EST are the same wall times: already fired
        "2026-11-01 02:20 EST",
    ]
    gap = walk(CronSchedule("*/20 * * * *", tz=NY), at(2026, 3, 8, 6, 30), at(2026, 3, 8, 7, 30))
    assert [local(f, NY) for f in gap] == [
        "2026-03-08 01:40 EST",
        "2026-03-08 03:00 EDT",
        "2026-03-08 03:20 EDT",
    ]


def test_berlin_spring_forward_and_fall_back() -> None:
    spring = walk(CronSchedule("0 2 * * *", tz=BERLIN), at(2026, 3, 28, 12), at(2026, 3, 30, 12))
    assert [local(f, BERLIN) for f in spring] == ["2026-03-29 03:00 CEST", "2026-03-30 02:00 CEST"]
    # Celery computed the non-existent 02:30+01:00 (01:30 UTC) here; the rule gives 03:00 CEST.
    half = CronSchedule("30 2 * * *", tz=BERLIN).next_after(at(2026, 3, 28, 12))
    assert half == at(2026, 3, 29, 1, 0)
    fall = walk(CronSchedule("30 2 * * *", tz=BERLIN), at(2026, 10, 24, 12), at(2026, 10, 26, 12))
    assert [local(f, BERLIN) for f in fall] == ["2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"]


def _field(spec: str, lo: int, hi: int) -> set[int]:
    if spec == "*":
        return set(range(lo, hi + 1))
    if spec.startswith("*/"):
        return set(range(lo, hi + 1, int(spec[2:])))
    return {int(v) for v in spec.split(",")}


def _oracle(expr: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """Walk real time minute by minute; fire when the wall clock first reaches a matching time."""
    minute_f, hour_f = expr.split()[:2]
    minutes, hours = _field(minute_f, 0, 59), _field(hour_f, 0, 23)
    zone, out = ZoneInfo(tz), []
    high = start.astimezone(zone).replace(tzinfo=None)  # the highest wall reading so far
    u = start + MINUTE
    while u <= end:
        wall = u.astimezone(zone).replace(tzinfo=None)
        n, hit = high + MINUTE, False
        while n <= wall and not hit:  # every wall minute newly reached at u
            hit = n.minute in minutes and n.hour in hours
            n += MINUTE
        if hit:
            out.append(u)
        high = max(high, wall)
        u += MINUTE
    return out


@pytest.mark.parametrize(
    ("tz", "year"),
    [
        (NY, 2026),
        (BERLIN, 2026),
        ("Australia/Lord_Howe", 2026),  # 30-minute DST
        ("Europe/Dublin", 2026),  # "negative DST" in the tz database
        ("America/Santiago", 2026),  # southern hemisphere, midnight transitions
        ("Pacific/Apia", 2011),  # skipped 2011-12-30 entirely
    ],
)
def test_dst_rule_against_a_minute_by_minute_oracle(tz: str, year: int) -> None:
    zone, transitions = ZoneInfo(tz), []
    hour = timedelta(hours=1)
    u = at(year, 1, 1)
    while u.year == year:  # find the transitions of that year, to the hour
        if (u + hour).astimezone(zone).utcoffset() != u.astimezone(zone).utcoffset():
            transitions.append(u)
        u += hour
    assert transitions
    for expr in ["*/20 * * * *", "30 1,2 * * *", "0 0 * * *", "0,45 23,0,3 * * *"]:
        schedule = CronSchedule(expr, tz=tz)
        for edge in transitions:
            start, end = edge - timedelta(hours=30), edge + timedelta(hours=30)
            assert walk(schedule, start, end) == _oracle(expr, tz, start, end), (expr, edge)


# --- intervals ----------------------------------------------------------------------------------


def test_interval_is_anchored_not_relative() -> None:
    five = IntervalSchedule(timedelta(minutes=5))
    assert five.next_after(at(2026, 1, 1, 12, 3, 10)) == at(2026, 1, 1, 12, 5)
    assert five.next_after(at(2026, 1, 1, 12, 5)) == at(2026, 1, 1, 12, 10)  # strictly after
    shifted = IntervalSchedule(300, anchor=at(2026, 1, 1, 0, 0, 7))
    assert shifted.next_after(at(2026, 1, 1, 12, 3, 10)) == at(2026, 1, 1, 12, 5, 7)
    assert shifted.next_after(at(1999, 12, 31, 23, 53)) == at(1999, 12, 31, 23, 55, 7)  # k < 0
    quarter = IntervalSchedule(0.25)
    assert quarter.next_after(at(2026, 1, 1, 0, 0, 0, 100)) == at(2026, 1, 1, 0, 0, 0, 250_000)
    berlin_anchor = datetime(2026, 1, 1, 1, 0, tzinfo=ZoneInfo(BERLIN))
    assert IntervalSchedule(3600, anchor=berlin_anchor).anchor == at(2026, 1, 1, 0, 0)
    assert five.describe() == "every 0:05:00 from 2000-01-01T00:00:00+00:00"


# --- day-of-month with day-of-week --------------------------------------------------------------


def test_day_of_month_and_day_of_week() -> None:
    start, end = at(2026, 1, 1), at(2026, 3, 31)
    days = [f.strftime("%a %d %b") for f in walk(CronSchedule("0 0 1-7 * 1"), start, end)]
    # croniter's default (day_or=True) is cron's OR: days 1-7 of each month, plus every Monday.
    assert days[:7] == [
        *("Fri 02 Jan", "Sat 03 Jan", "Sun 04 Jan", "Mon 05 Jan", "Tue 06 Jan", "Wed 07 Jan"),
        "Mon 12 Jan",
    ]
    # Celery's crontab ANDs the two fields: day_or=False gives the first Monday of each month.
    first_monday = CronSchedule("0 0 1-7 * 1", day_or=False)
    assert [f.strftime("%a %d %b") for f in walk(first_monday, start, end)] == [
        "Mon 05 Jan",
        "Mon 02 Feb",
        "Mon 02 Mar",
    ]
    assert first_monday.describe() == "cron '0 0 1-7 * 1' in UTC, day-of-month AND day-of-week"
    # Pinned quirk: croniter ORs a stepped star ('*/2') too, where Vixie cron would AND it.
    odd_or_monday = walk(CronSchedule("0 0 */2 * 1"), start, at(2026, 1, 13))
    assert [f.day for f in odd_or_monday] == [3, 5, 7, 9, 11, 12, 13]
    # Only a bare '*' is unrestricted: then the other field alone decides.
    assert [f.day for f in walk(CronSchedule("0 0 * * 1"), start, end)][:2] == [5, 12]


def test_sixth_field_is_seconds_at_the_end() -> None:
    assert CronSchedule("* * * * * 15").next_after(at(2026, 1, 1, 12)) == at(2026, 1, 1, 12, 0, 15)
    assert CronSchedule("@hourly").next_after(at(2026, 1, 1, 12, 5)) == at(2026, 1, 1, 13)


# --- refused with a hint ------------------------------------------------------------------------


def _refused(match: str, fn: object, *args: object, **kwargs: object) -> ConfigError:
    assert callable(fn)
    with pytest.raises(ConfigError, match=match) as info:
        fn(*args, **kwargs)
    assert info.value.hint, "every refusal names the fix"
    return info.value


@pytest.mark.parametrize(
    ("expr", "match"),
    [
        ("61 * * * *", "not valid"),
        ("* * * *", "4 fields"),
        ("* * * * * * 2030", "7 fields"),
        ("", "non-empty"),
        ("0 0 30 2 *", "never fires"),
        ("H * * * *", "hashed/random"),
        ("R 2 * * *", "hashed/random"),
        ("bogus * * * *", "not valid"),
        ("@reboot", "not valid"),
    ],
)
def test_bad_cron_refused(expr: str, match: str) -> None:
    _refused(match, CronSchedule, expr)


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "../etc/passwd", "", "EST5EDT "])
def test_unknown_time_zone_refused(tz: str) -> None:
    assert "tz database" in _refused("time zone", CronSchedule, "0 2 * * *", tz).hint


@pytest.mark.parametrize("every", [0, -1, math.nan, math.inf, timedelta(0), True, "5"])
def test_bad_interval_refused(every: object) -> None:
    _refused("every", IntervalSchedule, every)


def test_host_time_zone_refused() -> None:
    _refused("differs between machines", CronSchedule, "0 2 * * *", "localtime")


def test_bad_instants_and_options_refused() -> None:
    _refused("timezone-aware", IntervalSchedule, 60, datetime(2026, 1, 1))
    _refused("timezone-aware", EVERY_MINUTE.next_after, datetime(2026, 1, 1))
    _refused("policy", missed, EVERY_MINUTE, None, BACK, "sometimes")
    _refused("max_catch_up", missed, EVERY_MINUTE, None, BACK, "all", 0)


@job
def report(occurrence: str, catch_up: bool) -> None:
    """A job the ``job=`` shorthand can call."""


@job
def wrong_shape(day: str) -> None:
    """A job the shorthand cannot call."""


def test_bad_task_declarations_refused() -> None:
    _refused("exactly one of cron= and every=", task, "t", cron="* * * * *", every=60, job=report)
    _refused("exactly one of cron= and every=", task, "t", job=report)
    _refused("exactly one of enqueue= and job=", task, "t", every=60)
    _refused("exactly one of enqueue= and job=", task, "t", every=60, job=report, enqueue=list)
    _refused("task name", task, "has space", every=60, job=report)
    _refused("task name", task, "a@b", every=60, job=report)  # '@' is the key's separator
    _refused("not a policy", task, "t", every=60, job=report, catch_up="sometimes")
    _refused("max_catch_up", task, "t", every=60, job=report, catch_up="all", max_catch_up=0)
    _refused("every", task, "t", every=0, job=report)
    _refused("every", task, "t", every=math.nan, job=report)
    _refused("time zone", task, "t", cron="0 2 * * *", tz="Nowhere/Land", job=report)
    _refused("tz=", task, "t", every=60, tz=NY, job=report)
    _refused("anchor=", task, "t", cron="0 2 * * *", anchor=at(2026, 1, 1), job=report)
    _refused("occurrence= and catch_up=", task, "t", every=60, job=wrong_shape)
    _refused("not a @job", task, "t", every=60, job=print)


# --- tasks --------------------------------------------------------------------------------------


def test_occurrence_key_is_task_at_utc_iso() -> None:
    berlin_two = datetime(2026, 3, 30, 2, 0, tzinfo=ZoneInfo(BERLIN))
    occ = Occurrence("nightly", berlin_two, catch_up=False)
    assert occ.at == at(2026, 3, 30, 0, 0) and occ.at.tzinfo is UTC
    assert occ.key == "nightly@2026-03-30T00:00:00+00:00"
    assert re.fullmatch(r"[^@]+@[^@]+", occ.key)
    with pytest.raises(AttributeError):
        occ.catch_up = True  # type: ignore[misc]


def test_job_shorthand_says_which_occurrence_and_whether_catch_up() -> None:
    nightly = task("nightly", cron="0 2 * * *", tz=NY, catch_up="run-once", job=report)
    plan = nightly.plan(at(2026, 3, 6, 12), at(2026, 3, 8, 12))
    assert [o.key for o in plan.occurrences] == ["nightly@2026-03-08T07:00:00+00:00"]
    (request,) = nightly.requests(plan.occurrences[0])
    assert request.definition is report and request.args == ()
    assert request.kwargs == {"occurrence": "2026-03-08T07:00:00+00:00", "catch_up": True}
    assert request.options.idempotency_key == "nightly@2026-03-08T07:00:00+00:00"
    assert repr(nightly) == "<task nightly cron '0 2 * * *' in America/New_York catch_up=run-once>"


def test_enqueue_function_chooses_the_jobs() -> None:
    def fan_out(occ: Occurrence) -> list[EnqueueRequest]:
        return [
            report.call(occurrence=f"{occ.at:%Y-%m-%d}/{t}", catch_up=occ.catch_up) for t in "ab"
        ]

    sync = task("sync", every=timedelta(minutes=5), catch_up="all", max_catch_up=3, enqueue=fan_out)
    plan = sync.plan(at(2026, 1, 1, 0, 0), at(2026, 1, 1, 1, 0))
    assert len(plan.occurrences) == 3 and plan.result.more
    assert [r.kwargs["occurrence"] for r in sync.requests(plan.occurrences[0])] == [
        "2026-01-01/a",
        "2026-01-01/b",
    ]
    single = task("single", every=60, enqueue=lambda occ: report.call("x", False))  # type: ignore[arg-type, return-value]
    _refused("not a list", single.requests, plan.occurrences[0])
    junk = task("junk", every=60, enqueue=lambda occ: ["not a request"])  # type: ignore[list-item]
    _refused("in its list", junk.requests, plan.occurrences[0])
    assert task("none", every=60, enqueue=lambda occ: []).requests(plan.occurrences[0]) == []


def test_tasks_from_module() -> None:
    module = ModuleType("app_tasks")
    nightly = task("nightly", cron="0 2 * * *", job=report)
    module.nightly, module.alias, module.other = nightly, nightly, object()  # type: ignore[attr-defined]
    module.hourly = task("hourly", cron="0 * * * *", job=report)  # type: ignore[attr-defined]
    found = tasks_from_module(module)
    assert sorted(found) == ["hourly", "nightly"] and isinstance(found["nightly"], PeriodicTask)
    module.clash = task("nightly", every=60, job=report)  # type: ignore[attr-defined]
    _refused("two periodic tasks", tasks_from_module, module)
