"""The libpq DSN of a Django database, from Django's own connection parameters, for the
connections the bridge opens itself (the worker and scheduler of ``manage.py ujobs_worker`` /
``ujobs_scheduler``, the admin's actions in ``ujobs_django.jobs``).

Why it exists: a Django project names its database once, in ``DATABASES``; whatever driver
Django uses there (psycopg 3 or 2), the bridge's own statements run on psycopg 3 connections
built from the same host, port, name, user, password and options.

What it is not: Django's connection (a statement run here is outside Django's transaction).
"""

from __future__ import annotations

import psycopg
from django.db import connections


def dsn_of(alias: str) -> str:
    """The DSN of Django's database ``alias`` (the libpq keywords among its connection
    parameters: host, port, dbname, user, password, sslmode ...)."""
    params = connections[alias].get_connection_params()
    keywords = {d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()}
    given = {
        k: v
        for k, v in params.items()
        if k in keywords and isinstance(v, str | int) and not isinstance(v, bool) and v != ""
    }
    return psycopg.conninfo.make_conninfo("", **given)
