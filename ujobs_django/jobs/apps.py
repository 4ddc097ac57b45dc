"""The Django app config of ``ujobs_django.jobs`` (label ``ujobs_jobs``): the admin over the
bridge's tables.

What it is not: the ``django.tasks`` backend's app (``ujobs_django``).
"""

from __future__ import annotations

from django.apps import AppConfig


class UjobsJobsConfig(AppConfig):  # type: ignore[misc]
    name = "ujobs_django.jobs"
    label = "ujobs_jobs"
    verbose_name = "Jobs (ujobs-bridge)"
    default_auto_field = "django.db.models.BigAutoField"
