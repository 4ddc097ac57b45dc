"""Celery's documented project layout ("First steps" / the Django guide): ``proj/celery.py``
holds the app, ``proj/__init__.py`` imports it so it is loaded with the package, and the tasks
live in ``proj/tasks.py``. ``-A apps.guide_proj`` must find the app as ``celery -A`` does."""

from .celery import app as celery_app

__all__ = ["celery_app"]
