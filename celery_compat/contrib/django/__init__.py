"""``celery_compat.contrib.django``: Django helpers, mirroring ``celery.contrib.django``.

``DjangoTask`` (``task.py``) adds ``delay_on_commit()``/``apply_async_on_commit()``. On the
bridge they are rarely needed: when Django's database is the jobs database (and Django uses
psycopg 3), a plain ``delay()`` inside ``transaction.atomic()`` is inserted in that same
transaction, so it commits or rolls back with your writes. The ``_on_commit`` variants still work
(the message is sent after the commit, outside it), for code that already uses them or for a
Django database that is not the jobs database.

What it is not: a Django app; nothing goes in ``INSTALLED_APPS``.
"""

from __future__ import annotations

from celery_compat.contrib.django.task import DjangoTask

__all__ = ["DjangoTask"]
