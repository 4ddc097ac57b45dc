"""The project's Celery app: the one line that changed is ``from celery_compat import Celery``."""

from __future__ import annotations

import os

from celery_compat import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "apps.celery_proj.settings")

app = Celery("celery_proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
