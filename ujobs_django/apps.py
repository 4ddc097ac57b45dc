"""The Django app config of ``ujobs_django``: what ``INSTALLED_APPS`` names so that Django finds
the ``manage.py ujobs_worker`` and ``ujobs_scheduler`` commands.

What it is not: a place with models; the jobs live in the engine's tables (the admin's read-only
models over them are the ``ujobs_django.jobs`` app).
"""

from __future__ import annotations

from django.apps import AppConfig


class UjobsDjangoConfig(AppConfig):  # type: ignore[misc]
    name = "ujobs_django"
    label = "ujobs_django"
    verbose_name = "ujobs-bridge"
