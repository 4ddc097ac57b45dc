"""Schedules and catch-up arithmetic: when a periodic task is due, and what to fire after an outage.

Why it exists: the scheduler must answer two questions deterministically: "when is the next
occurrence after this instant?" (``Schedule.next_after``) and "the scheduler last decided up to
``watermark``; now it is ``now``: which occurrences fire?" (``missed``). The answers must not depend
on the host's time zone or on how long the scheduler was down, so occurrences are aware UTC
instants, local-time rules (DST) are stated and tested here, and the ``skip`` policy finds the
latest missed occurrence by search, never by walking one missed occurrence at a time.

    CronSchedule("0 2 * * *", tz="America/New_York").next_after(now)   # aware UTC datetime
    IntervalSchedule(timedelta(minutes=5)).next_after(now)
    missed(schedule, watermark, now, "skip", max_catch_up=100)          # -> CatchUp

What it is not: a scheduler. Nothing here reads a clock, touches the database or sleeps; leader
election, the dedup index on (task, occurrence) and enqueueing live elsewhere (``task.py`` declares
tasks; the scheduler service calls ``missed`` once per task per round).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal, Protocol, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ujobs_bridge._internal.jobs import validation
from ujobs_bridge.errors import ConfigError, ErrorCode, ScheduleError

if TYPE_CHECKING:  # imported where a cron schedule is built: a worker that has none never pays
    from croniter import croniter  # for croniter and dateutil (a tenth of its start-up)

CatchUpPolicy = Literal["skip", "run-once", "all"]
CATCH_UP_POLICIES: tuple[str, ...] = get_args(CatchUpPolicy)
DEFAULT_ANCHOR = datetime(2000, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_MICRO = timedelta(microseconds=1)
_ZERO = timedelta(0)
_HOST_ZONES = frozenset({"localtime", "posixrules"})  # files some systems link to /etc/localtime
_ITERATORS = threading.local()  # per thread: {(expr, day_or): croniter}; croniter is mutable


class Schedule(Protocol):
    """What the catch-up arithmetic needs from a schedule."""

    @property
    def resolution(self) -> timedelta:
        """Any two occurrences differ by a whole multiple of this (1 s for cron, ``every`` for an
        interval). It only tells the search when it may stop; it never changes an answer."""
        ...

    def next_after(self, instant: datetime) -> datetime:
        """The first occurrence strictly after ``instant`` (aware), as an aware UTC datetime."""
        ...

    def describe(self) -> str: ...


def _utc(what: str, value: datetime) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(
            f"{what} {value!r} is not a timezone-aware datetime",
            hint="pass an aware datetime, e.g. datetime.now(UTC)",
        )
    return value.astimezone(UTC)


def _first_change(lo: datetime, hi: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in (lo, hi] whose UTC offset in ``zone`` differs from lo's offset.
    Precondition: exactly one transition in the window. About 32 cheap steps for an hour."""
    before = lo.astimezone(zone).utcoffset()
    while hi - lo > _MICRO:
        mid = lo + (hi - lo) // 2
        if mid.astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi


def _check_expression(expr: object) -> str:
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError(
            f"cron expression {expr!r} is not a non-empty string",
            hint="write 5 fields 'minute hour day-of-month month day-of-week', e.g. '0 2 * * *'",
        )
    text = " ".join(expr.split())
    if text.startswith("@"):
        return text  # croniter's aliases (@hourly, @daily, ...): it refuses the ones it lacks
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise ScheduleError(
            f"cron expression {expr!r} has {len(fields)} fields",
            hint="write 5 fields 'minute hour day-of-month month day-of-week', plus an optional "
            "6th field for SECONDS at the end, e.g. '*/5 * * * * 30'",
        )
    for part in (p for f in fields for p in f.split(",")):
        if part[:1] in ("H", "h", "R", "r"):
            raise ScheduleError(
                f"cron expression {expr!r} uses hashed/random field {part!r}",
                hint="write explicit values: an occurrence must be the same on every scheduler",
            )
    return text


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression evaluated on the wall clock of an IANA time zone.

    Fields: ``minute hour day-of-month month day-of-week`` and optionally a 6th field for SECONDS
    at the END (croniter's order, not Quartz's seconds-first). Day-of-week 0 and 7 are Sunday.

    Day-of-month with day-of-week (``day_or``): by default croniter's rule, which is the classic
    cron OR: when both fields are restricted, a day matching EITHER fires (``0 0 1-7 * 1`` is days
    1-7 plus every Monday). croniter treats only a literal ``*`` as unrestricted, so ``*/2`` counts
    as restricted and ORs too (Vixie cron would AND it, since the field starts with ``*``).
    Celery's ``crontab`` always ANDs (``day_of_month='1-7', day_of_week=1`` is the first Monday);
    pass ``day_or=False`` for that.

    DST (and any other change of UTC offset), one rule: an occurrence scheduled at wall-clock time
    ``w`` fires at the FIRST instant at which the zone's wall clock reads ``w`` or later. So:

    * a time that does not exist (spring-forward gap, 02:30 on 2026-03-08 in New York) fires once,
      at the first instant after the gap (03:00 EDT); several gap times collapse into that one fire;
    * a time that occurs twice (fall-back, 01:30 on 2026-11-01 in New York) fires once, at its
      first occurrence (01:30 EDT). That holds for every time in the repeated hour, so
      ``*/20 * * * *`` fires 01:00, 01:20, 01:40 EDT and then 02:00 EST: the repeated hour is not
      run a second time. Use ``tz="UTC"`` for schedules that must tick through it.
    """

    expr: str
    tz: str = "UTC"
    day_or: bool = True
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        expr = _check_expression(self.expr)
        if self.tz in _HOST_ZONES:
            raise ScheduleError(
                f"time zone {self.tz!r} names the host's setting, which differs between machines",
                hint="name the zone, e.g. tz='Europe/Berlin', so every scheduler agrees",
            )
        try:
            zone = ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
            raise ScheduleError(
                f"time zone {self.tz!r} is not a known IANA zone ({type(exc).__name__})",
                hint="use a name from the tz database, e.g. 'UTC', 'Europe/Berlin' or "
                "'America/New_York' (install the tzdata package if the OS has none)",
            ) from exc
        if not isinstance(self.day_or, bool):
            raise ScheduleError(f"day_or must be True or False, got {self.day_or!r}")
        object.__setattr__(self, "expr", expr)
        object.__setattr__(self, "zone", zone)
        # import cost: croniter (and dateutil) load only once a cron schedule is built
        from croniter import CroniterBadDateError, CroniterError

        try:
            self._iterator().get_next(datetime)
        except CroniterBadDateError as exc:
            raise ScheduleError(
                f"cron expression {self.expr!r} never fires (no match within 50 years)",
                hint="check day-of-month against the months (there is no February 30)",
            ) from exc
        except (CroniterError, ValueError, KeyError, TypeError) as exc:
            raise ScheduleError(
                f"cron expression {self.expr!r} is not valid: {exc}",
                hint="write 5 fields 'minute hour day-of-month month day-of-week', e.g. "
                "'*/15 9-17 * * mon-fri', plus an optional 6th SECONDS field at the end",
            ) from exc

    @property
    def resolution(self) -> timedelta:
        return _SECOND  # wall times are whole seconds and tz offsets/transitions are too

    def describe(self) -> str:
        days = "" if self.day_or else ", day-of-month AND day-of-week"
        return f"cron '{self.expr}' in {self.tz}{days}"

    def _iterator(self, wall: datetime = DEFAULT_ANCHOR) -> croniter:
        # One croniter per expression and thread, re-aimed with set_current: parsing the
        # expression costs more than a lookup, so it is parsed once. It runs on a "wall clock tagged UTC", so croniter never applies DST itself.
        cache: dict[tuple[str, bool], croniter] | None = getattr(_ITERATORS, "cache", None)
        if cache is None:
            cache = _ITERATORS.cache = {}
        it = cache.get((self.expr, self.day_or))
        if it is None:
            # import cost: as in __post_init__ (croniter loads with the first cron schedule)
            from croniter import croniter

            it = croniter(self.expr, wall, day_or=self.day_or)
            cache[(self.expr, self.day_or)] = it
        else:
            it.set_current(wall, force=True)
        return it

    def _next_wall(self, wall: datetime) -> datetime:
        """The first wall-clock match strictly after naive ``wall`` (whole seconds)."""
        nxt: datetime = self._iterator(wall.replace(tzinfo=UTC)).get_next(datetime)
        return nxt.replace(tzinfo=None)

    def _instant(self, wall: datetime) -> datetime:
        """The first instant at which the wall clock reads ``wall`` or later."""
        first = wall.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        if first.astimezone(self.zone).replace(tzinfo=None) == wall:
            return first  # exists (fold=0 is the first of two readings)
        other = wall.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        return _first_change(min(first, other), max(first, other), self.zone)  # in a gap

    def next_after(self, instant: datetime) -> datetime:
        # The map wall -> _instant(wall) is non-decreasing, and _instant(w) <= u exactly when the
        # wall clock has read w or later at some instant <= u. So the answer is _instant of the
        # first match past the highest wall reading so far: wall(u) itself, except in the second
        # pass of a repeated hour, where the first pass already read up to the transition.
        u = _utc("instant", instant)
        local = u.astimezone(self.zone)
        wall = local.replace(tzinfo=None, microsecond=0)
        if local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset():
            offset_after = local.utcoffset()
            offset_before = local.replace(fold=0).utcoffset()
            assert offset_after is not None and offset_before is not None
            change = _first_change(u - (offset_before - offset_after), u, self.zone)
            top = change.replace(tzinfo=None) + offset_before  # where the first pass stopped
            if top.microsecond:
                top = top.replace(microsecond=0) + _SECOND
            wall = top - _SECOND  # first match >= top
        return self._instant(self._next_wall(wall))


@dataclass(frozen=True)
class IntervalSchedule:
    """Fires at ``anchor + k * every`` for every integer k (the anchor fixes the phase, not a start).

    The default anchor, 2000-01-01T00:00Z, makes ``every=300`` fire at :00, :05, ... UTC on every
    scheduler and after every restart. Celery's interval instead runs ``every`` after the last run;
    pass ``anchor=`` to choose another phase. ``every`` is kept to the microsecond.
    """

    every: timedelta
    anchor: datetime = DEFAULT_ANCHOR

    def __init__(self, every: timedelta | float, anchor: datetime = DEFAULT_ANCHOR) -> None:
        try:
            seconds = validation.seconds("every", every)
        except ConfigError as exc:
            raise ScheduleError(exc.message, hint=exc.hint) from None
        step = every if isinstance(every, timedelta) else timedelta(seconds=seconds)
        if step <= _ZERO:
            raise ScheduleError(
                f"every is {seconds}s, which rounds to zero microseconds",
                hint="set every to at least 1 microsecond",
            )
        object.__setattr__(self, "every", step)
        object.__setattr__(self, "anchor", _utc("anchor", anchor))

    @property
    def resolution(self) -> timedelta:
        return self.every

    def describe(self) -> str:
        return f"every {self.every} from {self.anchor.isoformat()}"

    def next_after(self, instant: datetime) -> datetime:
        k = (_utc("instant", instant) - self.anchor) // self.every + 1
        return self.anchor + k * self.every


@dataclass(frozen=True, slots=True)
class Fire:
    """One occurrence to fire: its instant (UTC) and whether it is a catch-up."""

    at: datetime
    catch_up: bool


@dataclass(frozen=True, slots=True)
class CatchUp:
    """What ``missed`` decided for one task in one round.

    ``fires``: oldest first. ``watermark``: store it; every occurrence in (old, new watermark] is
    decided (fired or deliberately skipped). ``more``: only ``all`` sets it, when ``max_catch_up``
    cut the round short; the rest follows from ``watermark`` next round. ``oldest``: the first
    occurrence after the old watermark, if one is due (what a missed-runs metric reports).
    ``resolver_calls``: how many times ``next_after`` was asked.
    """

    fires: tuple[Fire, ...]
    watermark: datetime
    more: bool
    oldest: datetime | None
    resolver_calls: int


def missed(
    schedule: Schedule,
    watermark: datetime | None,
    now: datetime,
    policy: CatchUpPolicy,
    max_catch_up: int = 100,
    *,
    grace: timedelta = _ZERO,
) -> CatchUp:
    """The occurrences in (watermark, now] to fire under ``policy``.

    Which fires count as catch-up: an occurrence ``o`` is LATE when ``now - o > grace``; ``o == now``
    is never late. A late occurrence fires flagged ``catch_up=True``; an on-time one fires as a
    normal run. The scheduler passes its round interval as ``grace`` so that an occurrence seen at
    the next round is not called late. (A ``now`` before ``watermark``, e.g. a leader with a slower
    clock, decides nothing and keeps the watermark.)

    * ``skip``: exactly one fire, the LATEST occurrence <= now (flagged if late); the earlier
      ones are dropped. Found by search in O(log) ``next_after`` calls, never one per occurrence.
    * ``run-once``: exactly one fire, the latest occurrence, flagged ``catch_up=True`` if ANY
      occurrence in the window is late: that one run stands in for all of them.
    * ``all``: every occurrence, oldest first, each flagged if late; at most ``max_catch_up`` per
      round, then ``more=True`` and ``watermark`` = the last one fired.

    ``watermark=None`` is a new task: no backlog. Nothing fires unless an occurrence is exactly
    ``now``; the watermark becomes ``now``, so the first fire is the next occurrence after it.
    """
    now = _utc("now", now)
    if policy not in CATCH_UP_POLICIES:
        raise ConfigError(
            f"catch_up policy {policy!r} is unknown",
            hint=f"use one of {', '.join(CATCH_UP_POLICIES)}",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    validation.positive_int("max_catch_up", max_catch_up)
    if not isinstance(grace, timedelta) or grace < _ZERO:
        raise ConfigError(f"grace {grace!r} is not allowed", hint="pass a timedelta >= 0")
    calls = 0

    def next_after(instant: datetime) -> datetime:
        nonlocal calls
        calls += 1
        found = schedule.next_after(instant)
        if not found > instant:  # the searches below rely on it; a broken schedule must not spin
            raise ScheduleError(
                f"{schedule.describe()}: next_after({instant.isoformat()}) returned {found!r}",
                hint="a Schedule must return an aware instant strictly after the one it is given",
            )
        return found

    def late(at: datetime) -> bool:
        return now - at > grace

    if watermark is None:
        at_now = next_after(now - _MICRO) == now
        fires = (Fire(now, False),) if at_now else ()
        return CatchUp(fires, now, False, now if at_now else None, calls)
    start = _utc("watermark", watermark)
    if now <= start:
        return CatchUp((), start, False, None, calls)
    oldest = next_after(start)
    if oldest > now:
        return CatchUp((), now, False, None, calls)

    if policy == "all":
        fired: list[Fire] = []
        at = oldest
        while at <= now and len(fired) < max_catch_up:
            fired.append(Fire(at, late(at)))
            at = next_after(at)
        more = at <= now
        return CatchUp(tuple(fired), fired[-1].at if more else now, more, oldest, calls)

    latest = _latest(next_after, start, oldest, now, schedule.resolution)
    flag = late(latest) if policy == "skip" else late(oldest)
    return CatchUp((Fire(latest, flag),), now, False, oldest, calls)


def _latest(
    next_after: Callable[[datetime], datetime],
    start: datetime,
    oldest: datetime,
    now: datetime,
    resolution: timedelta,
) -> datetime:
    """The latest occurrence L <= now, given ``oldest = next_after(start) <= now``.

    Only ``next_after`` is available, and ``next_after(t) <= now`` is monotone in t: true exactly
    when an occurrence lies in (t, now]. Invariant: ``best`` is an occurrence <= now and no
    occurrence lies in (hi, now], so best <= L <= hi.

    1. Gallop back from now: probe now - r, now - 2r, now - 4r, ... (r = resolution). A probe p
       with next_after(p) > now moves hi to p; the first with next_after(p) <= now gives best.
       A probe below L succeeds, so this takes at most log2((now - L) / r) + 2 calls; a probe at
       or below ``start`` reuses ``oldest`` and costs nothing, so also at most log2(gap / r) + 2.
    2. Bisect: mid = best + (hi - best) / 2; next_after(mid) <= now makes it the new best (it is
       past mid), otherwise hi = mid. Either way hi - best at least halves. Every occurrence is
       best + k*r, so once hi - best < r no occurrence but best lies in [best, hi]: L = best.
       That is at most log2(span / r) + 1 calls, and the span is < the last gallop step.

    Total O(log(min(gap, now - L) / r)): for '* * * * *' (r = 1 s, now - L < 60 s) at most ~14
    calls whatever the outage; one per missed occurrence never.
    """
    hi, step = now, resolution
    while True:
        if step >= now - start:
            best = oldest  # the probe would be at or before start: next_after(start) is known
            break
        probe = now - step
        found = next_after(probe)
        if found <= now:
            best = found
            break
        hi, step = probe, step * 2
    while hi - best >= resolution:
        mid = best + (hi - best) // 2
        found = next_after(mid)
        if found <= now:
            best = found
        else:
            hi = mid
    return best
