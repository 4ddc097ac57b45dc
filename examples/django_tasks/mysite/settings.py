"""Settings of the example project: Django's ``django.tasks`` on the ujobs-bridge backend.

The database is Django's ``default`` on PostgreSQL through psycopg 3, named by ``DATABASE_URL``
(a libpq DSN or URL); it is also the jobs database, so a task enqueued inside
``transaction.atomic()`` commits or rolls back with the block. Install the engine's schema once
with ``ujobs-bridge db upgrade --dsn "$DATABASE_URL"``, then run ``python manage.py ujobs_worker``.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "ujobs_django",  # manage.py ujobs_worker / ujobs_scheduler
    "orders",
]

TASKS = {
    "default": {
        "BACKEND": "ujobs_django.backend.UjobsTaskBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"DATABASE": "default"},
    },
    # A second backend on the same database whose tasks get a second attempt: a task that
    # raises is READY again (after the engine's backoff) until its attempts are spent.
    "retrying": {
        "BACKEND": "ujobs_django.backend.UjobsTaskBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 2},
    },
}


def database(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for a libpq DSN or URL."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": info.get("dbname", ""),
        "USER": info.get("user", ""),
        "PASSWORD": info.get("password", ""),
        "HOST": info.get("host", ""),
        "PORT": str(info.get("port", "")),
    }


DATABASES = {
    "default": database(os.environ.get("DATABASE_URL", "postgresql:///mysite")),
}
