"""Whether an app's ``result_backend`` names django-celery-results' ``django-db``, for the app to use
``celery_compat.contrib.django.results`` instead of the Postgres backend.

Why it is a module of its own: ``celery_compat.Celery`` decides its backend when it is first
asked for, in every process, Django or not; the backend itself imports Django's models, so
only this name test is imported by the app.

What it is not: the backend (``contrib/django/results.py``).
"""

from __future__ import annotations

from typing import Any

# What ``result_backend`` may say for the rows of django-celery-results to be used: Celery's
# alias (an entry point of that package) and the class paths the package documents.
NAMES = (
    "django-db",
    "django_celery_results.backends:DatabaseBackend",
    "django_celery_results.backends.database:DatabaseBackend",
)


def names_django_db(result_backend: Any) -> bool:
    """Whether ``result_backend`` names django-celery-results' database backend (``django-db``,
    with or without ``://``, or its class path)."""
    if not isinstance(result_backend, str):
        return False
    return result_backend.partition("://")[0] in NAMES
