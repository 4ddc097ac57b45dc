"""The project's Celery app, laid out as Celery's "First steps with Django" guide lays it out.
The one line that differs: ``from celery_compat import Celery``."""

from __future__ import annotations

import os

from celery_compat import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
