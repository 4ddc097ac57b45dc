"""``celery_compat.contrib``: test fixtures, an in-process worker and Django helpers.

What it is not: Celery's contrib modules (rdb, sphinx, abortable) — import those from celery.
"""
