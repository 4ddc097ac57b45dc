"""The app of ``apps.guide_bare``, under a name ``find_app`` does not look for first."""

from __future__ import annotations

from celery_compat import Celery

bare_app = Celery("guide_bare")


@bare_app.task
def ping() -> str:
    return "pong"
