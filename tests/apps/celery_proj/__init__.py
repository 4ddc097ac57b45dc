"""A Django-style project as real Celery users lay it out: ``proj/celery.py`` holds the app,
``proj/__init__.py`` imports it so ``shared_task`` binds to it, ``proj/settings.py`` carries the
``CELERY_*`` settings, and each installed app has a ``tasks.py`` found by ``autodiscover_tasks``.
The only celery_compat line is the app's import in ``celery.py``."""

from .celery import app as celery_app

__all__ = ["celery_app"]
