"""``celery beat`` for celery_compat apps: beat sends the occurrences the bridge scheduler sends.

Why it exists: the hand-over from ``celery beat`` to ``ujobs-bridge scheduler -A proj`` runs both
for a while. Celery's ``PersistentScheduler`` sends every run with a random task id, and runs an
interval entry ``every`` after its previous run, so an occurrence both of them fire would run
twice and their interval phases would never meet. ``BeatScheduler`` (the default
``beat_scheduler`` of ``celery_compat.Celery``; a ``beat_scheduler`` or ``-S`` you set wins) is
Celery's ``PersistentScheduler`` (shelve file, heap, signals, remote control) with these changes:

* a convertible entry (``celery_compat.beat.entries``: crontab, timedelta, seconds, ``schedule``) is sent
  by ``send_occurrence`` for the instant the bridge scheduler uses: task id
  ``occurrence_task_id(entry, instant)``, headers ``ujobs_occurrence``/``ujobs_catch_up``. The
  first send of an occurrence is stored; the other one is absorbed by the Celery ledger.
* crontab entries keep Celery's due-check (and ``beat_cron_starting_deadline``); the instant is
  the latest occurrence <= now of the converted cron (Celery's own instant, except in a DST gap,
  where the bridge's instant is taken so both still agree on the id).
* interval entries follow the bridge's anchored grid (2000-01-01T00:00Z + k*every) instead of
  "every after the last run": due when a grid instant lies in (last_run_at, now], and
  ``last_run_at`` becomes that instant. After beat was down, ``ujobs_catch_up`` chooses (skip:
  the latest instant; run-once: the latest, flagged; all: each one, oldest first).
* an occurrence more than ``GRACE`` old when sent is flagged ``ujobs_catch_up`` (the bridge's
  default grace, so both flag alike).
* bridge sends never open a broker connection.

Entries that do not convert (``solar``, custom schedule classes, a bad ``ujobs_`` option) are sent
by Celery's own code (random id, beat's phase), with one warning per entry.

What it is not: leader election (run one ``celery beat``, as always; the bridge scheduler is the
replicated one) or the conversion itself (``beat.py``, ``beat_convert.py``).
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from celery.beat import PersistentScheduler, SchedulingError, event_t
from celery.schedules import schedstate
from celery.utils.time import maybe_make_aware

from celery_compat.beat.convert import Mapped, Unmappable, convert_schedule
from celery_compat.beat.entries import BeatEntry, _entry, _policy, engine_task_name, send_occurrence
from celery_compat.sending.send import BRIDGE_PRODUCER
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.ext.scheduling import DEFAULT_INTERVAL_S, CatchUpPolicy, Occurrence, missed

if TYPE_CHECKING:  # the mixin's methods call Celery's Scheduler (untyped) through super()
    from celery.beat import Scheduler as _SchedulerBase
else:
    _SchedulerBase = object

log = logging.getLogger("celery_compat.beat_scheduler")

# An occurrence sent later than this after its instant is a catch-up (the bridge's default grace).
GRACE = timedelta(seconds=2 * DEFAULT_INTERVAL_S)
# Before any occurrence of a converted schedule: "the latest occurrence <= now" is searched from here.
_FAR_PAST = datetime(1970, 1, 1, tzinfo=UTC)
# Celery's ``Scheduler.adjust`` wakes 10 ms early; grid delays add it back so beat wakes on time.
_DRIFT_S = 0.010


@dataclass(frozen=True)
class _Plan:
    """One beat entry, converted once (until its editable fields change)."""

    source: Any  # the ScheduleEntry it was made from (compared with Celery's editable_fields_equal)
    entry: BeatEntry | None
    mapped: Mapped | None
    policy: CatchUpPolicy = "skip"
    max_catch_up: int = 1


def _utc(value: datetime) -> datetime:
    return maybe_make_aware(value).astimezone(UTC)  # type: ignore[no-any-return]


class OccurrenceSending(_SchedulerBase):  # type: ignore[misc]
    """What a Celery beat ``Scheduler`` subclass mixes in (first) to send bridge occurrences:
    ``BeatScheduler`` here, django-celery-beat's ``DatabaseScheduler`` in ``django_scheduler``."""

    app: Any
    _heap: Any
    _tasks_since_sync: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._plans: dict[str, _Plan] = {}
        self._warned: set[str] = set()
        self._reserved: dict[str, Occurrence] = {}
        super().__init__(*args, **kwargs)

    def beat_entry(self, entry: Any) -> BeatEntry:
        """The ``BeatEntry`` a Celery ``ScheduleEntry`` stands for (a subclass may read more)."""
        return _entry(entry.name, entry)

    @property
    def producer(self) -> Any:
        """Bridge sends need no broker; ``ujobs_broker_tasks`` still reach it via ``send_task``."""
        return BRIDGE_PRODUCER

    @property
    def info(self) -> str:
        return f"{super().info}\n    . occurrences -> ujobs-bridge ids (celery_compat)"

    # -- conversion -----------------------------------------------------------------------------

    def _plan(self, entry: Any) -> _Plan:
        cached = self._plans.get(entry.name)
        if cached is not None and entry.editable_fields_equal(cached.source):
            return cached
        try:
            beat_entry = self.beat_entry(entry)
            mapped = convert_schedule(entry.schedule, self.app)
            policy, bound = _policy(beat_entry)
            plan = _Plan(entry, beat_entry, mapped, policy, bound)
        except (Unmappable, ConfigError) as exc:
            reason = exc.reason if isinstance(exc, Unmappable) else exc.message
            plan = _Plan(entry, None, None)
            if entry.name not in self._warned:
                self._warned.add(entry.name)
                log.warning(
                    "celery_compat.beat_scheduler.fallback: %r is sent by Celery's own code "
                    "(random task id; ujobs-bridge scheduler refuses this entry): %s",
                    entry.name,
                    reason,
                )
        self._plans[entry.name] = plan
        return plan

    def _now(self, entry: Any) -> datetime:
        return _utc(entry.default_now())

    def occurrence(self, entry: Any, now: datetime | None = None) -> Occurrence | None:
        """The occurrence a send of ``entry`` at ``now`` stands for, as the bridge scheduler
        names it; ``None`` when the entry does not convert, or (interval) none is due."""
        plan = self._plan(entry)
        if plan.mapped is None:
            return None
        at = self._now(entry) if now is None else _utc(now)
        if plan.mapped.kind == "interval":
            got = missed(
                plan.mapped.schedule, _utc(entry.last_run_at), at, plan.policy, 1, grace=GRACE
            )
        else:  # Celery decided it is due: the instant is the latest cron occurrence <= now
            got = missed(plan.mapped.schedule, _FAR_PAST, at, "skip", grace=GRACE)
        if not got.fires:
            return None
        return Occurrence(engine_task_name(entry.name), got.fires[0].at, got.fires[0].catch_up)

    # -- due-check on the grid (intervals) ------------------------------------------------------

    def is_due(self, entry: Any) -> Any:
        plan = self._plan(entry)
        if plan.mapped is None or plan.mapped.kind != "interval":
            return super().is_due(entry)
        now = self._now(entry)
        occurrence = self.occurrence(entry, now)
        after = now if occurrence is None else occurrence.at
        delay = max((plan.mapped.schedule.next_after(after) - now).total_seconds(), 0.0)
        return schedstate(occurrence is not None, delay + _DRIFT_S if delay > 0 else 0.0)

    def populate_heap(self, event_t: Any = event_t, heapify: Any = heapq.heapify) -> None:
        """Celery's, asking ``self.is_due`` (the grid) instead of ``entry.is_due``."""
        self._heap = []
        for entry in self.schedule.values():
            try:
                due, next_call_delay = self.is_due(entry)
            except Exception:
                due, next_call_delay = self._is_due_failed(entry)
            when = self._when(entry, 0 if due else next_call_delay) or 0
            self._heap.append(event_t(when, 5, entry))
        heapify(self._heap)

    # -- sending --------------------------------------------------------------------------------

    def reserve(self, entry: Any) -> Any:
        """Celery's (a new entry: run count + 1), remembering the occurrence being sent; an
        interval entry's ``last_run_at`` becomes that grid instant, not the wall time."""
        occurrence = self.occurrence(entry)
        new_entry = super().reserve(entry)
        if occurrence is not None:
            self._reserved[entry.name] = occurrence
            plan = self._plan(entry)
            if plan.mapped is not None and plan.mapped.kind == "interval":
                new_entry.last_run_at = occurrence.at
        return new_entry

    def apply_async(
        self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> Any:
        plan = self._plan(entry)
        if plan.entry is None:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        if advance:
            self.reserve(entry)
        occurrence = self._reserved.pop(entry.name, None) or self.occurrence(entry)
        if occurrence is None:  # nothing of the converted schedule is due: beat's own send
            return super().apply_async(entry, producer=producer, advance=False, **kwargs)
        try:
            result = send_occurrence(self.app, plan.entry, occurrence)
        except Exception as exc:
            raise SchedulingError(f"Couldn't apply scheduled task {entry.name}: {exc}") from exc
        finally:
            self._tasks_since_sync += 1
            if self.should_sync():
                self._do_sync()
        log.info(
            "celery_compat.beat_scheduler.sent: %s occurrence %s%s task id %s",
            entry.name,
            occurrence.at.isoformat(),
            " (catch-up)" if occurrence.catch_up else "",
            getattr(result, "id", None),
        )
        return result


class BeatScheduler(OccurrenceSending, PersistentScheduler):  # type: ignore[misc]
    """Celery's ``PersistentScheduler`` sending bridge occurrences (see the module docstring)."""


__all__ = ["GRACE", "BeatScheduler", "OccurrenceSending"]
