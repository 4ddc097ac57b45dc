"""Celery beat on the engine's scheduler: ``beat_schedule`` entries (``entries``), their schedules
converted (``convert``), ``celery beat`` (``scheduler``) and ``celery -A proj beat`` (``command``).

What it is not: Celery's beat process; the engine's leader-elected scheduler fires the tasks.
"""
