"""Celery beat on the engine's scheduler: ``beat_schedule`` entries become periodic tasks.

Why it exists: ``ujobs-bridge scheduler -A proj`` replaces ``celery beat``. Each entry of
``app.conf.beat_schedule`` (including those ``app.add_periodic_task`` adds in
``on_after_configure``/``on_after_finalize``, which are triggered here exactly as beat triggers
them) becomes a ``PeriodicTask``: its schedule from ``beat_convert`` (crontab → exact cron with
Celery's day AND, intervals → interval trigger, in ``app.conf.timezone``), and an
``enqueue_in_fire`` that sends the Celery message the way beat does (``task.apply_async`` when
the task is registered, else ``app.send_task``, with the entry's args/kwargs/options, lazy
``BeatLazyFunc`` arguments evaluated, and the ``celery_beat_task`` header) on the connection of
the scheduler's fire transaction, which hands it over explicitly. The row is therefore an
ordinary Celery message that commits with the fire record. Two things are added:

* a task id derived from (entry name, occurrence instant): a re-fired occurrence (a scheduler
  that died between sending and recording the fire) is absorbed by the Celery ledger too;
* headers ``ujobs_occurrence`` (ISO-8601 UTC instant) and ``ujobs_catch_up`` (bool), which the
  task reads as ``self.request.ujobs_occurrence`` / ``self.request.headers``.

Per entry, ``options={"ujobs_catch_up": "skip" | "run-once" | "all", "ujobs_max_catch_up": N}``
chooses what an outage leaves behind; the default ``skip`` matches beat (one run after an
outage, for the latest missed occurrence). Those keys never reach the message.

What it is not: the scheduler (``ujobs_bridge._internal.scheduling``; leader election, the fire ledger and
watermarks live there) or the schedule arithmetic (``beat_convert``). ``solar`` entries are
refused with the reason, never approximated.
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import psycopg
from celery.beat import BeatLazyFunc, ScheduleEntry

from celery_compat.beat.convert import Mapped, Unmappable, celery_schedule, convert_schedule
from celery_compat.sending.transaction import enqueue_in
from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.ext.jobs import EnqueueRequest
from ujobs_bridge.ext.scheduling import (
    CATCH_UP_POLICIES,
    DEFAULT_MAX_CATCH_UP,
    CatchUpPolicy,
    Occurrence,
    PeriodicTask,
    tasks_from_module,
)

log = logging.getLogger("celery_compat.beat")

# Task ids of beat occurrences: uuid5(this, "<entry name>@<ISO-8601 UTC instant>").
OCCURRENCE_NAMESPACE = uuid.UUID("5b0e6a52-8d0c-4b8e-9a39-2f0c4c1d7e61")
ENGINE_PREFIX = "beat:"
_ENTRY_KEYS = frozenset(
    {"task", "schedule", "args", "kwargs", "options", "relative", "last_run_at", "total_run_count"}
)
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.:\-<>]+")


@dataclass(frozen=True)
class BeatEntry:
    """One ``beat_schedule`` entry, as beat reads it."""

    name: str
    task: str
    schedule: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    relative: bool = False


@dataclass(frozen=True)
class Conversion:
    """What one entry became: a periodic task, or the reason it cannot be one."""

    name: str
    engine_name: str
    entry: BeatEntry | None
    schedule_repr: str
    mapped: Mapped | None = None
    periodic: PeriodicTask | None = None
    reason: str | None = None
    notes: tuple[str, ...] = ()

    def as_dict(self, now: datetime | None = None) -> dict[str, Any]:
        """The JSON ``beat convert --json`` prints (``now`` adds the next fire time)."""
        m, p, e = self.mapped, self.periodic, self.entry
        return {
            "name": self.name,
            "engine_task": self.engine_name,
            "task": e.task if e else None,
            "schedule": self.schedule_repr,
            "kind": m.kind if m else None,
            "cron": m.cron if m else None,
            "day_or": m.day_or if m else None,
            "every_s": m.every.total_seconds() if m and m.every is not None else None,
            "tz": m.tz if m else None,
            "catch_up": p.catch_up if p else None,
            "max_catch_up": p.max_catch_up if p else None,
            "queue": e.options.get("queue") if e else None,
            "engine_schedule": p.schedule.describe() if p else None,
            "next": p.schedule.next_after(now).isoformat() if p and now else None,
            "notes": [*(m.notes if m else ()), *self.notes],
            "ok": self.reason is None,
            "reason": self.reason,
        }


def occurrence_task_id(entry_name: str, at: datetime) -> str:
    """The Celery task id of one occurrence of an entry: the same on every scheduler and retry."""
    if at.utcoffset() is None:
        raise ConfigError(f"occurrence instant {at!r} is not timezone-aware")
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"{entry_name}@{at.astimezone(UTC).isoformat()}"))


def engine_task_name(entry_name: str) -> str:
    """The scheduler's name for an entry: ``beat:<name>``, made safe (spaces are common in beat
    entry names) with a short hash of the original when anything had to change, so two entries
    never share a fire ledger or watermark, and a native ``task()`` of the same name neither."""
    safe = _NAME_UNSAFE.sub("-", entry_name).strip("-")
    name = ENGINE_PREFIX + safe
    if safe != entry_name or len(name) > 200:
        digest = hashlib.sha1(entry_name.encode(), usedforsecurity=False).hexdigest()[:8]
        name = f"{ENGINE_PREFIX}{safe[:180]}-{digest}"
    return name


def prepare(app: Any) -> None:
    """Configure and finalize the app as ``celery beat`` does: import its modules (``include``,
    ``imports``, autodiscovery), run ``on_after_configure``/``on_after_finalize`` handlers, so
    ``add_periodic_task`` entries are in ``conf.beat_schedule``."""
    app.loader.import_default_modules()
    app.finalize(auto=True)
    _ = app.conf.beat_schedule


def _entry(name: str, raw: Any) -> BeatEntry:
    if isinstance(raw, ScheduleEntry):
        raw = {
            "task": raw.task,
            "schedule": raw.schedule,
            "args": raw.args,
            "kwargs": raw.kwargs,
            "options": raw.options,
        }
    if not isinstance(raw, Mapping):
        raise Unmappable(f"entry {raw!r} is not a dict with 'task' and 'schedule'")
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise Unmappable(f"unknown key(s) {unknown} (celery beat refuses this entry too)")
    task = raw.get("task")
    if not isinstance(task, str) or not task:
        raise Unmappable("the entry names no 'task'")
    if raw.get("schedule") is None:
        raise Unmappable("the entry has no 'schedule'")
    options = raw.get("options") or {}
    if not isinstance(options, Mapping):
        raise Unmappable(f"options {options!r} is not a dict")
    return BeatEntry(
        name=name,
        task=task,
        schedule=raw["schedule"],
        args=tuple(raw.get("args") or ()),
        kwargs=dict(raw.get("kwargs") or {}),
        options=dict(options),
        relative=bool(raw.get("relative", False)),
    )


def _policy(entry: BeatEntry) -> tuple[CatchUpPolicy, int]:
    policy = entry.options.get("ujobs_catch_up", "skip")
    if policy not in CATCH_UP_POLICIES:
        raise Unmappable(
            f"options ujobs_catch_up={policy!r} is not a policy: use one of "
            + ", ".join(repr(p) for p in CATCH_UP_POLICIES)
        )
    bound = entry.options.get("ujobs_max_catch_up", DEFAULT_MAX_CATCH_UP)
    if isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= 10_000:
        raise Unmappable(f"options ujobs_max_catch_up={bound!r} is not an integer in 1..10000")
    return policy, bound


def send_occurrence(app: Any, entry: BeatEntry, occurrence: Occurrence) -> Any:
    """Send the entry's message for one occurrence, as beat's ``Scheduler.apply_async`` does;
    returns Celery's ``AsyncResult``. A second send of the same occurrence inserts nothing."""
    options = {k: v for k, v in entry.options.items() if not k.startswith("ujobs_")}
    headers = dict(options.pop("headers", None) or {})
    headers["celery_beat_task"] = True
    headers["ujobs_occurrence"] = occurrence.at.isoformat()
    headers["ujobs_catch_up"] = occurrence.catch_up
    options["headers"] = headers
    options["task_id"] = occurrence_task_id(entry.name, occurrence.at)
    args = [v() if isinstance(v, BeatLazyFunc) else v for v in entry.args]
    kwargs = {k: v() if isinstance(v, BeatLazyFunc) else v for k, v in entry.kwargs.items()}
    task = app.tasks.get(entry.task)
    if task is not None:
        return task.apply_async(args, kwargs, **options)
    return app.send_task(entry.task, args, kwargs, **options)


def _enqueue_for(
    app: Any, entry: BeatEntry
) -> Callable[[Occurrence, psycopg.Connection[Any]], list[EnqueueRequest]]:
    def enqueue(occurrence: Occurrence, conn: psycopg.Connection[Any]) -> list[EnqueueRequest]:
        # ``conn`` is the scheduler's fire transaction: the message commits with the fire row,
        # and a duplicate fire rolls it back.
        with enqueue_in(conn):
            send_occurrence(app, entry, occurrence)
        return []  # the message is already a row (deduplicated by its task id, too)

    enqueue.__qualname__ = f"beat[{entry.name}]"
    return enqueue


def convert_app(app: Any) -> list[Conversion]:
    """Every beat entry of ``app`` (configured and finalized first), converted, in name order."""
    prepare(app)
    out: list[Conversion] = []
    for name, raw in sorted(dict(app.conf.beat_schedule or {}).items()):
        name = str(name)
        engine = engine_task_name(name)
        shown = repr(raw.get("schedule") if isinstance(raw, Mapping) else raw)
        entry: BeatEntry | None = None
        mapped: Mapped | None = None
        try:
            entry = _entry(name, raw)
            shown = repr(celery_schedule(entry.schedule, app, relative=entry.relative))
            mapped = convert_schedule(entry.schedule, app, relative=entry.relative)
            policy, bound = _policy(entry)
            periodic = PeriodicTask(
                engine,
                mapped.schedule,
                catch_up=policy,
                max_catch_up=bound,
                enqueue_in_fire=_enqueue_for(app, entry),
            )
        except Unmappable as exc:
            out.append(Conversion(name, engine, entry, shown, mapped, reason=exc.reason))
            continue
        except ConfigError as exc:
            out.append(Conversion(name, engine, entry, shown, mapped, reason=exc.message))
            continue
        notes = _deadline_note(app) if mapped.kind == "cron" and policy == "skip" else ()
        out.append(Conversion(name, engine, entry, shown, mapped, periodic, notes=notes))
    return out


def _deadline_note(app: Any) -> tuple[str, ...]:
    deadline = app.conf.get("beat_cron_starting_deadline")
    if deadline is None:
        return ()
    return (
        f"beat_cron_starting_deadline={deadline} is not applied: after an outage 'skip' still "
        "sends the latest missed occurrence, however old",
    )


def periodic_tasks_for_app(app: Any, *, strict: bool = True) -> list[PeriodicTask]:
    """The app's beat entries as periodic tasks for ``ujobs_bridge.Scheduler``.

    An entry that cannot map (``solar``, a bad option) is refused: with ``strict`` (the default)
    the whole call raises ``ConfigError`` naming every such entry and why, so a scheduler never
    starts silently without one of beat's entries; ``strict=False`` logs each and leaves it out.
    """
    conversions = convert_app(app)
    refused = [c for c in conversions if c.reason is not None]
    if refused and strict:
        lines = "; ".join(f"{c.name!r}: {c.reason}" for c in refused)
        raise ConfigError(
            f"{len(refused)} beat_schedule entr{'y' if len(refused) == 1 else 'ies'} cannot run on "
            f"the ujobs-bridge scheduler: {lines}",
            hint="`ujobs-bridge beat convert -A <app>` lists every entry; remove or change the "
            "refused ones (or keep them on celery beat)",
            code=ErrorCode.SCHEDULE_INVALID,
        )
    for c in refused:
        log.warning("celery_compat.beat.refused: %s: %s", c.name, c.reason)
    return [c.periodic for c in conversions if c.periodic is not None]


def scheduler_tasks(target: Any, app: Any) -> dict[str, PeriodicTask]:
    """What ``ujobs-bridge scheduler -A`` fires for a target holding a Celery app: the app's beat
    entries plus any native ``task()``s declared in the same module (a name used twice is refused)."""
    found = {p.name: p for p in periodic_tasks_for_app(app)}
    if isinstance(target, ModuleType):
        for name, periodic in tasks_from_module(target).items():
            if name in found:
                raise ConfigError(
                    f"periodic task {name!r} is both a beat entry and a task() in {target.__name__}",
                    hint="rename one of them",
                    code=ErrorCode.TASK_DUPLICATE,
                )
            found[name] = periodic
    return found


__all__ = [
    "BeatEntry",
    "Conversion",
    "convert_app",
    "engine_task_name",
    "occurrence_task_id",
    "periodic_tasks_for_app",
    "prepare",
    "scheduler_tasks",
    "send_occurrence",
]
