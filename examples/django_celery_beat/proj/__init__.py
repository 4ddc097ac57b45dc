"""The project package: it loads the Celery app with Django, as Celery's Django guide says."""

from proj.celery import app as celery_app

__all__ = ["celery_app"]
