"""django-celery-beat's ``DatabaseScheduler`` sending the bridge scheduler's occurrences.

Why it exists: the hand-over from django-celery-beat's beat to the bridge scheduler runs both
for a while, reading the same ``PeriodicTask`` rows. django-celery-beat sends each run with a
random task id, so an occurrence both send would run twice. This class is django-celery-beat's
``DatabaseScheduler`` (the rows, ``PeriodicTasks.changed``, ``total_run_count``/``last_run_at``
saving, one-off and expiry handling, all unchanged) with ``OccurrenceSending`` mixed in, as
``BeatScheduler`` is Celery's ``PersistentScheduler`` with it: each convertible entry is sent
under ``occurrence_task_id(name, instant)`` with the bridge scheduler's instant (intervals on the
anchored grid, clocked at its time), so the Celery ledger keeps the first send of an occurrence
and absorbs the other. ``celery beat`` on a celery_compat app whose ``beat_scheduler`` is
django-celery-beat's runs this class in its place; ``-S
celery_compat.beat.django_scheduler:DatabaseScheduler`` names it. The ``ujobs_`` keys of a row's
``headers`` are its policies (``django_beat.py``), not message headers.

What it is not: the bridge scheduler's reading of the tables (``django_beat.py``). A solar row is
sent by django-celery-beat's own code (random id), with a warning.
"""

from __future__ import annotations

from typing import Any

from django_celery_beat.schedulers import DatabaseScheduler as CeleryBeatDatabaseScheduler

from celery_compat.beat.entries import BeatEntry, _entry
from celery_compat.beat.scheduler import OccurrenceSending


class DatabaseScheduler(OccurrenceSending, CeleryBeatDatabaseScheduler):  # type: ignore[misc]
    """django-celery-beat's scheduler, sending bridge occurrences (module docstring)."""

    def beat_entry(self, entry: Any) -> BeatEntry:
        made = _entry(entry.name, entry)
        headers = dict(made.options.get("headers") or {})
        options = {k: v for k, v in made.options.items() if k != "headers"}
        for key in [k for k in headers if isinstance(k, str) and k.startswith("ujobs_")]:
            options[key] = headers.pop(key)
        options["headers"] = headers
        return BeatEntry(made.name, made.task, made.schedule, made.args, made.kwargs, options)


__all__ = ["DatabaseScheduler"]
