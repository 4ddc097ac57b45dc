"""django-celery-beat's tables as the bridge scheduler's schedule, edited live.

Why it exists: a Django project keeps its periodic tasks in django-celery-beat's ``PeriodicTask``
rows and edits them in the admin. With ``beat_scheduler`` set to django-celery-beat's
``DatabaseScheduler`` (``CELERY_BEAT_SCHEDULER`` in Django settings, what every such project
has), ``ujobs-bridge scheduler -A proj`` (and ``celery beat``, ``manage.py ujobs_scheduler``)
read those rows instead of asking for a ``beat_schedule`` in code. ``DjangoBeatSource`` is the
engine scheduler's ``TaskSource``: every round, on the leader's connection, it reads
``PeriodicTasks.last_update`` (the marker django-celery-beat moves on every save or delete) and
re-reads the enabled rows when it moved (or every ``FULL_READ``, or when a row's ``expires``
has come), so an admin edit takes effect
at the next round without a restart. Each row becomes a ``PeriodicTask`` named
``engine_task_name(row.name)`` (``beat:<name>``, the name a ``beat_schedule`` entry of the same
name has, so the hand-over from code to table keeps its watermark):

* schedule: crontab (in the row's own ``timezone``, Celery's day AND kept), interval (on the
  engine's fixed grid: the phase differs from django-celery-beat's "every after the last run"),
  clocked (its one instant; ``one_off``), solar refused with the reason and left out;
* ``enabled``: only enabled rows fire; ``start_time``: nothing before it; ``expires``: nothing at
  or after it, and the row is disabled as django-celery-beat disables it; ``one_off``: the fire
  that sends it disables it (``total_run_count``/``last_run_at`` are kept);
* the message: as django-celery-beat's ``ModelEntry`` builds it (``args``/``kwargs`` JSON,
  ``queue``/``exchange``/``routing_key``/``priority``, ``expires``/``expire_seconds``,
  ``headers`` plus ``periodic_task_name``), sent with the occurrence's task id
  (``send_occurrence``) in the fire's transaction, which also adds 1 to ``total_run_count`` and
  sets ``last_run_at``: the three commit together with the fire record, once per occurrence;
* where the scheduler starts from (what django-celery-beat calls ``last_run_at``): the engine's
  watermark; for a row first seen, its ``last_run_at`` (where django-celery-beat's own beat
  stopped); for a row never run or re-enabled (``last_run_at`` empty), not before its last edit
  (``date_changed``), as django-celery-beat does; a clocked row not yet run, its clocked time.

Policies, per row, in its ``headers`` JSON (editable in the admin; taken out of the message):
``"ujobs_catch_up"``: ``"skip"`` (default: after downtime one run, for the latest missed
occurrence), ``"run-once"``, ``"all"`` (each missed one, at most ``"ujobs_max_catch_up"`` per
round, default 100); ``"ujobs_overlap"``: ``"allow"`` (default, as beat) or ``"skip"`` (an
occurrence is not sent while a message this entry sent earlier waits or runs). A bad value
leaves the row out with a warning naming it, and the other rows run.

What it is not: django-celery-beat's ``DatabaseScheduler`` (``django_scheduler.py`` is that
class sending bridge occurrences, for the hand-over) or the admin. It reads the tables with its
own SQL on the scheduler's connection, so they must be in the bridge's database (Django's
``default`` in the usual layout); it does not need Django's settings loaded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import psycopg
from celery.schedules import crontab

from celery_compat.beat.convert import (
    Mapped,
    OnceSchedule,
    Unmappable,
    convert_schedule,
    crontab_in_zone,
)
from celery_compat.beat.entries import (
    BeatEntry,
    Conversion,
    _policy,
    engine_task_name,
    send_occurrence,
)
from celery_compat.db import django_beat as store
from celery_compat.sending.transaction import enqueue_in
from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.ext.jobs import EnqueueRequest
from ujobs_bridge.ext.scheduling import Occurrence, PeriodicTask, Plan

log = logging.getLogger("celery_compat.django_beat")

SCHEDULER_NAMES = frozenset(
    {
        "django_celery_beat.schedulers:DatabaseScheduler",
        "django_celery_beat.schedulers.DatabaseScheduler",
        "celery_compat.beat.django_scheduler:DatabaseScheduler",
        "celery_compat.beat.django_scheduler.DatabaseScheduler",
    }
)
# Rows are re-read at least this often even when the marker did not move (django-celery-beat
# does the same: an edit made with ``update()`` moves no marker).
FULL_READ = timedelta(minutes=5)
OverlapPolicy = Literal["allow", "skip"]
OVERLAP_POLICIES: tuple[str, ...] = ("allow", "skip")
_MICRO = timedelta(microseconds=1)


def wants_tables(app: Any) -> bool:
    """Does the app's ``beat_scheduler`` name django-celery-beat's database scheduler?"""
    value = app.conf.get("beat_scheduler")
    return isinstance(value, str) and value in SCHEDULER_NAMES


@dataclass(frozen=True)
class Row:
    """One ``PeriodicTask`` row with its schedule row's columns (``django_beat_entries``)."""

    id: int
    name: str
    task: str
    args: str | None
    kwargs: str | None
    queue: str | None
    exchange: str | None
    routing_key: str | None
    headers: str | None
    priority: int | None
    expires: datetime | None
    expire_seconds: int | None
    one_off: bool
    start_time: datetime | None
    last_run_at: datetime | None
    total_run_count: int
    date_changed: datetime
    minute: str | None
    hour: str | None
    day_of_week: str | None
    day_of_month: str | None
    month_of_year: str | None
    timezone: str | None
    every: int | None
    period: str | None
    event: str | None
    latitude: Any
    longitude: Any
    clocked_time: datetime | None


def _json(text: str | None, default: Any, what: str) -> Any:
    if text is None or text == "":
        return default
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Unmappable(f"{what} is not JSON ({exc})") from exc


def entry_of(row: Row) -> BeatEntry:
    """The beat entry django-celery-beat's ``ModelEntry`` makes of ``row``; the ``ujobs_``
    policy keys of its headers become options (read by ``_policy``/``overlap_of``)."""
    args = _json(row.args, [], "args")
    kwargs = _json(row.kwargs, {}, "kwargs")
    headers = _json(row.headers, {}, "headers")
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(headers, dict):
        raise Unmappable("args must be a JSON list, kwargs and headers JSON objects")
    options: dict[str, Any] = {}
    for key in ("queue", "exchange", "routing_key", "priority"):
        value = getattr(row, key)
        if value is not None:
            options[key] = value
    if row.expires is not None or row.expire_seconds is not None:
        options["expires"] = row.expires or row.expire_seconds
    for key in [k for k in headers if isinstance(k, str) and k.startswith("ujobs_")]:
        options[key] = headers.pop(key)
    headers["periodic_task_name"] = row.name
    options["headers"] = headers
    return BeatEntry(row.name, row.task, None, tuple(args), kwargs, options)


def overlap_of(entry: BeatEntry) -> OverlapPolicy:
    value = entry.options.get("ujobs_overlap", "allow")
    if value not in OVERLAP_POLICIES:
        raise Unmappable(f"headers ujobs_overlap={value!r} is not a policy: use 'allow' or 'skip'")
    return "skip" if value == "skip" else "allow"


def schedule_of(row: Row, app: Any) -> Mapped:
    """The engine schedule of the row's one schedule (crontab, interval, clocked; solar refused)."""
    if row.minute is not None:
        try:
            c = crontab(
                minute=row.minute,
                hour=row.hour,
                day_of_week=row.day_of_week,
                day_of_month=row.day_of_month,
                month_of_year=row.month_of_year,
            )
        except (ValueError, TypeError) as exc:
            raise Unmappable(f"crontab {row.minute} {row.hour} ... is not valid ({exc})") from exc
        return crontab_in_zone(c, row.timezone or "UTC")
    if row.every is not None and row.period is not None:
        if row.period not in ("days", "hours", "minutes", "seconds", "microseconds"):
            raise Unmappable(f"interval period {row.period!r} is not one Django offers")
        return convert_schedule(timedelta(**{row.period: row.every}), app)
    if row.clocked_time is not None:
        return Mapped("once", OnceSchedule(row.clocked_time.astimezone(UTC)))
    if row.event is not None:
        raise Unmappable(
            f"solar {row.event} at ({row.latitude}, {row.longitude}) fires at an astronomical "
            "event computed per day; no cron or interval expresses it. Keep it on "
            "django-celery-beat's beat, or give the task a crontab at a fixed local time"
        )
    raise Unmappable("the row has no schedule (none of crontab, interval, solar, clocked)")


class DjangoBeatTask(PeriodicTask):
    """A ``PeriodicTask`` for one row: its plan honours ``start_time``, ``expires`` and where
    django-celery-beat would start from (see the module docstring)."""

    def __init__(self, row: Row, mapped: Mapped, entry: BeatEntry, fire: Any) -> None:
        policy, bound = _policy(entry)
        super().__init__(
            engine_task_name(row.name),
            mapped.schedule,
            catch_up=policy,
            max_catch_up=bound,
            enqueue_in_fire=fire,
        )
        self.row = row
        self.mapped = mapped
        self.entry = entry
        self.overlap = overlap_of(entry)

    def start(self, watermark: datetime | None) -> datetime | None:
        """Where this round's search starts (the effective watermark)."""
        row = self.row
        base = watermark if watermark is not None else row.last_run_at
        if row.last_run_at is None:  # never run, or re-enabled: nothing before its last edit
            base = row.date_changed if base is None else max(base, row.date_changed)
        if row.start_time is not None:
            floor = row.start_time - _MICRO
            base = floor if base is None else max(base, floor)
        if isinstance(self.schedule, OnceSchedule) and row.total_run_count == 0:
            before = self.schedule.at - _MICRO  # a clocked one-off fires even if created late
            base = before if base is None else min(base, before)
        return base

    def plan(
        self, watermark: datetime | None, now: datetime, *, grace: timedelta = timedelta(0)
    ) -> Plan:
        if self.row.expires is not None and now >= self.row.expires:
            now = self.row.expires - _MICRO  # occurrences before the expiry only
        start = self.start(watermark)
        if start is not None and now <= start:
            return super().plan(start, start, grace=grace)
        return super().plan(start, now, grace=grace)


class DjangoBeatSource:
    """The engine scheduler's ``TaskSource`` over django-celery-beat's tables (module docstring)."""

    def __init__(self, app: Any, *, now: Callable[[], datetime | None] = lambda: None) -> None:
        self.app = app
        self._now = now  # the injected clock's SQL instant (None: the database's now())
        self._marker: datetime | None = None
        self._read_at: datetime | None = None
        self._next_expiry: datetime | None = None  # the soonest ``expires`` of the rows read
        self._warned: dict[str, str] = {}
        self.refused: dict[str, str] = {}

    def refresh(
        self, conn: psycopg.Connection[Any], now: datetime
    ) -> Mapping[str, PeriodicTask] | None:
        try:
            marker = store.changed_marker(conn)
        except psycopg.errors.UndefinedTable as exc:
            raise ConfigError(
                "beat_scheduler names django-celery-beat's DatabaseScheduler, but its tables "
                "are not in the bridge's database",
                hint="run `python manage.py migrate django_celery_beat` on the database the "
                "bridge uses (or set beat_scheduler to another scheduler)",
                code=ErrorCode.SCHEDULE_INVALID,
            ) from exc
        fresh = self._read_at is not None and now - self._read_at < FULL_READ
        expiring = self._next_expiry is not None and now >= self._next_expiry
        if fresh and marker == self._marker and not expiring:
            return None
        for name in store.expire(conn, now):
            log.info("celery_compat.django_beat.expired: %s is disabled (past its expires)", name)
        tasks = self.read(conn)
        self._marker, self._read_at = marker, now
        return tasks

    def read(self, conn: psycopg.Connection[Any]) -> dict[str, PeriodicTask]:
        """Every enabled row as a task; refused rows are in ``self.refused`` with the reason."""
        out: dict[str, PeriodicTask] = {}
        self.refused = {}
        rows = [Row(*r) for r in store.entries(conn)]
        expiries = [r.expires for r in rows if r.expires is not None]
        self._next_expiry = min(expiries) if expiries else None
        for row in rows:
            try:
                built = self.task_of(row)
            except (Unmappable, ConfigError) as exc:
                reason = exc.reason if isinstance(exc, Unmappable) else exc.message
                self.refused[row.name] = reason
                if self._warned.get(row.name) != reason:
                    self._warned[row.name] = reason
                    log.warning("celery_compat.django_beat.refused: %s: %s", row.name, reason)
                continue
            out[built.name] = built
        return out

    def task_of(self, row: Row) -> DjangoBeatTask:
        entry = entry_of(row)
        mapped = schedule_of(row, self.app)
        return DjangoBeatTask(row, mapped, entry, self._fire_for(row, entry))

    def _fire_for(
        self, row: Row, entry: BeatEntry
    ) -> Callable[[Occurrence, psycopg.Connection[Any]], list[EnqueueRequest]]:
        app, now = self.app, self._now
        overlap = overlap_of(entry)

        def fire(occurrence: Occurrence, conn: psycopg.Connection[Any]) -> list[EnqueueRequest]:
            # ``conn`` is the fire's transaction: the message, the count and the fire record
            # commit together; a duplicate fire rolls all of them back.
            if overlap == "skip":
                busy = store.unfinished_job(conn, row.name)
                if busy is not None:
                    log.info(
                        "celery_compat.django_beat.overlap: %s occurrence %s not sent: job %s "
                        "of an earlier one has not finished",
                        row.name,
                        occurrence.at.isoformat(),
                        busy,
                    )
                    return []
            one_off = store.ran(conn, row.id, now())
            if one_off is None:
                log.info("celery_compat.django_beat.gone: %s was disabled or deleted", row.name)
                return []
            if one_off:  # a one-off is done: every scheduler re-reads the schedule
                store.mark_changed(conn, now())
            with enqueue_in(conn):
                send_occurrence(app, entry, occurrence)
            return []

        fire.__qualname__ = f"django_beat[{row.name}]"
        return fire


def convert_tables(app: Any, conn: psycopg.Connection[Any]) -> list[Conversion]:
    """What ``beat convert`` lists for the rows: each enabled row's engine form or why not."""
    source = DjangoBeatSource(app)
    out: list[Conversion] = []
    for row in [Row(*r) for r in store.entries(conn)]:
        engine = engine_task_name(row.name)
        try:
            built = source.task_of(row)
        except Unmappable as exc:
            out.append(Conversion(row.name, engine, None, _shown(row), reason=exc.reason))
            continue
        except ConfigError as exc:
            out.append(Conversion(row.name, engine, None, _shown(row), reason=exc.message))
            continue
        notes = () if built.overlap == "allow" else ("overlap: skip (not sent while one runs)",)
        out.append(
            Conversion(row.name, engine, built.entry, _shown(row), built.mapped, built, notes=notes)
        )
    return out


def _shown(row: Row) -> str:
    """The row's schedule as django-celery-beat's admin shows it."""
    if row.minute is not None:
        return (
            f"crontab {row.minute} {row.hour} {row.day_of_month} {row.month_of_year} "
            f"{row.day_of_week} ({row.timezone})"
        )
    if row.every is not None:
        return f"every {row.every} {row.period}"
    if row.clocked_time is not None:
        return f"clocked {row.clocked_time.isoformat()}"
    if row.event is not None:
        return f"solar {row.event} ({row.latitude}, {row.longitude})"
    return "-"


def source_for(app: Any, clock: Any = None) -> DjangoBeatSource | None:
    """The source for ``app`` when its ``beat_scheduler`` names django-celery-beat's."""
    if not wants_tables(app):
        return None
    if clock is None:
        return DjangoBeatSource(app)
    return DjangoBeatSource(app, now=clock.sql_now)


__all__ = [
    "FULL_READ",
    "OVERLAP_POLICIES",
    "SCHEDULER_NAMES",
    "DjangoBeatSource",
    "DjangoBeatTask",
    "Row",
    "convert_tables",
    "entry_of",
    "schedule_of",
    "source_for",
    "wants_tables",
]
