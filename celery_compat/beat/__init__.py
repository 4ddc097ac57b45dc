"""Celery beat on the engine's scheduler: ``beat_schedule`` entries (``entries``), their schedules
converted (``convert``), ``celery beat`` (``scheduler``) and ``celery -A proj beat`` (``command``);
django-celery-beat's ``PeriodicTask`` rows as a live schedule (``django_beat``) and its
``DatabaseScheduler`` sending bridge occurrences for the hand-over (``django_scheduler``).

What it is not: Celery's beat process; the engine's leader-elected scheduler fires the tasks.
"""
