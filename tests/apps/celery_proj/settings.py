"""Django settings of the test project. ``configure(dsn)`` points DATABASES (psycopg 3 backend)
and ``CELERY_UJOBS_DATABASE_URL`` at the test database and calls ``settings.configure``, as a
test runner does; everything else is ordinary ``CELERY_*`` configuration."""

from __future__ import annotations

from typing import Any

import psycopg

SECRET_KEY = "celery-compat-tests"  # a test project
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["apps.celery_proj.shop"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

CELERY_TIMEZONE = "UTC"
CELERY_TASK_DEFAULT_QUEUE = "shop"
CELERY_TASK_ROUTES = {"apps.celery_proj.shop.tasks.send_invoice": {"queue": "invoices"}}
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]


def configure(dsn: str) -> None:
    """Configure Django once for this process, on the test database."""
    from django.conf import settings

    if settings.configured:
        return
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    databases: dict[str, Any] = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": info["dbname"],
            "USER": info.get("user", "postgres"),
            "HOST": info.get("host", "127.0.0.1"),
            "PORT": str(info.get("port", "5432")),
        }
    }
    values = {k: v for k, v in globals().items() if k.isupper()}
    settings.configure(DATABASES=databases, CELERY_UJOBS_DATABASE_URL=dsn, **values)
    import django

    django.setup()
