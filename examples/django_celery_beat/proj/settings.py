"""Settings of the example project: periodic tasks kept in django-celery-beat's tables (edited
in the admin at /admin/), fired by ``python manage.py ujobs_scheduler`` (or ``ujobs-bridge scheduler -A
proj``) and run by ``ujobs-bridge worker -A proj``.

The database is Django's ``default`` on PostgreSQL through psycopg 3, named by ``DATABASE_URL``
(a libpq DSN or URL); django-celery-beat's tables and the jobs live in it. Set up once::

    ujobs-bridge db upgrade --dsn "$DATABASE_URL"
    python manage.py migrate
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "ujobs_django",  # manage.py ujobs_scheduler / ujobs_worker
    "reports",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "proj.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"


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


DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql:///proj")
DATABASES = {"default": database(DATABASE_URL)}

CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_UJOBS_DATABASE_URL = DATABASE_URL
