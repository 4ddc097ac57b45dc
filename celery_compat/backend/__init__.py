"""Results: the Postgres result backend, the listener that wakes ``AsyncResult.get()``, result writes
through an outage, task-id lookup and the retention of Celery's rows.

What it is not: ``celery_compat.result``, the mirror of ``celery.result`` that apps import.
"""
