"""Celery beat schedules as engine schedules: crontab → cron (exact), intervals → interval trigger.

Why it exists: ``beat_schedule`` entries carry Celery schedule objects, and the engine's
scheduler needs a ``Schedule`` (``ujobs_bridge._internal.scheduling.cron``). The conversion must fire on exactly the
instants Celery computes, so it never re-parses a crontab's text: it reads Celery's OWN expanded
integer sets (``c.minute``, ``c.hour``, ``c.day_of_month``, ``c.month_of_year``,
``c.day_of_week``, after Celery's parser handled names, ranges and steps) and writes them back as
a 5-field cron. Celery ANDs day-of-month with day-of-week (``day_of_month='1-7',
day_of_week=1`` is the first Monday), croniter ORs them by default, so when both day fields are
restricted the schedule is built with ``day_or=False``. The frame is the crontab's ``tz`` (the
app's ``timezone``, or what a ``crontab`` subclass such as django-celery-beat's sets); Celery
5.7 evaluates in that frame whatever ``nowfun`` returns, so ``nowfun`` plays no part here.

    mapped = convert_schedule(crontab(0, 0, day_of_month="1-7", day_of_week=1), app)
    mapped.cron, mapped.day_or      # '0 0 1-7 * 1', False

Intervals (``timedelta``, a number of seconds, ``schedule(run_every=)``) become an
``IntervalSchedule`` of the same length, whatever the length (7 s, 45 min, 5 h all work: no
"divides the hour" rule). The phase differs from beat's, which runs ``every`` after the previous
run: here occurrences sit on a fixed grid from 2000-01-01T00:00Z, the same on every scheduler and
after every restart.

django-celery-beat's ``clocked`` (a ``ClockedSchedule``: one instant) becomes a ``OnceSchedule``,
whose only occurrence is that instant.

What it is not: the beat entry reader or the sender (``beat.py``). ``solar`` and custom schedule
classes are refused with the reason (``Unmappable``), never approximated.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Literal

from celery.schedules import BaseSchedule, crontab, maybe_schedule, schedule, solar

from ujobs_bridge.errors import ConfigError
from ujobs_bridge.ext.scheduling import DEFAULT_ANCHOR, CronSchedule, IntervalSchedule

# (field attribute on crontab, lowest value, highest value), in cron's field order.
_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day_of_month", 1, 31),
    ("month_of_year", 1, 12),
    ("day_of_week", 0, 6),
)


# What "no occurrence after this one" answers (the Schedule protocol asks for an instant).
NEVER = datetime(9999, 12, 31, tzinfo=UTC)


@dataclass(frozen=True)
class OnceSchedule:
    """One instant and nothing after it (django-celery-beat's ``ClockedSchedule``)."""

    at: datetime

    @property
    def resolution(self) -> timedelta:
        return timedelta(microseconds=1)

    def describe(self) -> str:
        return f"once at {self.at.astimezone(UTC).isoformat()}"

    def next_after(self, instant: datetime) -> datetime:
        return self.at.astimezone(UTC) if instant < self.at else NEVER


class Unmappable(Exception):
    """This schedule has no exact engine form; ``reason`` says why and what to do."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Mapped:
    """The engine form of one Celery schedule."""

    kind: Literal["cron", "interval", "once"]
    schedule: CronSchedule | IntervalSchedule | OnceSchedule
    cron: str | None = None
    day_or: bool | None = None
    tz: str | None = None
    every: timedelta | None = None
    notes: tuple[str, ...] = ()


def cron_field(values: Any, lo: int, hi: int) -> str:
    """One cron field from an integer set: ``*`` when full, ``*/N`` for a step from the field's
    minimum, else comma-separated values with runs of three or more written as ranges."""
    vals = sorted({int(v) for v in values})
    if not vals or vals[0] < lo or vals[-1] > hi:
        raise Unmappable(f"field values {vals} fall outside {lo}-{hi}")
    if vals == list(range(lo, hi + 1)):
        return "*"
    if len(vals) > 2 and vals[0] == lo:
        step = vals[1] - vals[0]
        if vals == list(range(lo, hi + 1, step)):
            return f"*/{step}"
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{vals[i]}-{vals[j]}")
        else:
            parts.extend(str(v) for v in vals[i : j + 1])
        i = j + 1
    return ",".join(parts)


def crontab_to_cron(c: Any) -> tuple[str, bool]:
    """``(expression, day_or)`` from a crontab's expanded sets; ``day_or`` is False exactly when
    day-of-month and day-of-week are both restricted (Celery ANDs them)."""
    fields = [cron_field(getattr(c, attr), lo, hi) for attr, lo, hi in _FIELDS]
    dom_restricted = set(c.day_of_month) != set(range(1, 32))
    dow_restricted = set(c.day_of_week) != set(range(7))
    return " ".join(fields), not (dom_restricted and dow_restricted)


def zone_name(tz: tzinfo | None) -> str:
    """An IANA name for a Celery time zone; the host's local zone and bare offsets are refused
    (every scheduler must compute the same instants)."""
    if tz is None or tz is UTC:
        return "UTC"
    for attr in ("key", "zone"):  # zoneinfo.ZoneInfo, pytz (Celery < 5.3)
        name = getattr(tz, attr, None)
        if isinstance(name, str) and name and name not in ("localtime", "posixrules"):
            return name
    if str(tz) in ("UTC", "UTC+00:00") and tz.utcoffset(None) == timedelta(0):
        return "UTC"
    raise Unmappable(
        f"time zone {tz!r} has no IANA name (with enable_utc=False and no timezone, Celery uses "
        "the host's local time, which differs between machines): set app.conf.timezone to a "
        "name such as 'Europe/Berlin'"
    )


def _observes_dst(name: str) -> bool:
    cron = CronSchedule("0 0 * * *", name)
    offsets = {
        datetime(2026, month, 1, tzinfo=UTC).astimezone(cron.zone).utcoffset()
        for month in (1, 4, 7, 10)
    }
    return len(offsets) > 1


_DST_NOTE = (
    "DST: a wall time inside the spring-forward gap fires at the end of the gap (02:30 fires "
    "03:00 when clocks jump from 02:00 to 03:00; Celery computes 03:30); a wall time in the "
    "repeated fall-back hour fires once, at its first pass"
)
_PHASE_NOTE = (
    "phase: fires on a fixed grid from 2000-01-01T00:00Z, the same on every scheduler and after "
    "restarts (beat: one interval after the previous run)"
)


def celery_schedule(value: Any, app: Any, *, relative: bool = False) -> Any:
    """A beat ``schedule`` value as the Celery object beat uses (``maybe_schedule``: a number is
    seconds, a timedelta an interval; a schedule object is bound to ``app``)."""
    try:
        return maybe_schedule(value, relative, app=app)
    except (TypeError, ValueError, AttributeError) as exc:
        raise Unmappable(f"schedule {value!r} is not a Celery schedule ({exc})") from exc


def convert_schedule(value: Any, app: Any, *, relative: bool = False) -> Mapped:
    """The engine form of a beat ``schedule`` value, read the way beat reads it."""
    s = celery_schedule(value, app, relative=relative)
    if isinstance(s, solar):
        raise Unmappable(
            f"{s!r} fires at a solar event computed per day for a place (ephem); no cron or "
            "interval expresses it. Keep this entry on celery beat, or give it a crontab at a "
            "fixed local time"
        )
    if isinstance(s, crontab):
        return _from_crontab(s)
    clocked_time = getattr(s, "clocked_time", None)  # django-celery-beat's ``clocked``
    if isinstance(s, BaseSchedule) and isinstance(clocked_time, datetime):
        if clocked_time.utcoffset() is None:
            raise Unmappable(f"clocked time {clocked_time!r} is not timezone-aware")
        once = OnceSchedule(clocked_time.astimezone(UTC))
        return Mapped("once", once, notes=("fires once, at the clocked time",))
    if isinstance(s, schedule):
        return _from_interval(s)
    if isinstance(s, BaseSchedule):
        raise Unmappable(
            f"{type(s).__module__}.{type(s).__name__} is a custom schedule class: only crontab, "
            "schedule/timedelta/seconds map to the engine. Give the entry a crontab or an interval"
        )
    raise Unmappable(f"schedule {value!r} is not a Celery schedule, timedelta or number")


def crontab_in_zone(c: Any, zone: str) -> Mapped:
    """A crontab's engine form in the IANA zone ``zone`` (a ``CrontabSchedule`` row's own)."""
    return _from_crontab(c, zone)


def _from_crontab(c: Any, zone: str | None = None) -> Mapped:
    expr, day_or = crontab_to_cron(c)
    name = zone if zone is not None else zone_name(c.tz)
    try:
        cron = CronSchedule(expr, name, day_or=day_or)
    except ConfigError as exc:
        raise Unmappable(exc.message + (f" ({exc.hint})" if exc.hint else "")) from exc
    notes = (_DST_NOTE,) if _observes_dst(name) else ()
    return Mapped("cron", cron, cron=expr, day_or=day_or, tz=name, notes=notes)


def _from_interval(s: Any) -> Mapped:
    every = s.run_every
    if not isinstance(every, timedelta) or every <= timedelta(0):
        raise Unmappable(f"interval {every!r} is not a positive length of time")
    try:
        interval = IntervalSchedule(every, DEFAULT_ANCHOR)
    except ConfigError as exc:
        raise Unmappable(exc.message) from exc
    return Mapped("interval", interval, every=interval.every, notes=(_PHASE_NOTE,))
