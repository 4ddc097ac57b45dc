"""Enqueue inside the caller's database transaction: ``with enqueue_in(conn): task.delay()``.

Why it exists: the reason to put Celery's queue in Postgres is that a task can commit or roll
back WITH the write that makes it meaningful, with no ``on_commit`` dual write. Inside
``enqueue_in(conn)`` every message the facade sends is inserted on ``conn`` (a psycopg 3
connection, in its open transaction). Under Django, ``transaction.atomic()`` on a database that
is the jobs database does the same without any wrapper.

What it is not: a transaction manager. It never begins, commits or rolls back anything; the
caller's transaction decides.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

_current: contextvars.ContextVar[psycopg.Connection[Any] | None] = contextvars.ContextVar(
    "celery_compat_enqueue_conn", default=None
)


@contextmanager
def enqueue_in(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """Send every task inside this block on ``conn``, in its transaction."""
    if not isinstance(conn, psycopg.Connection):
        raise TypeError(
            f"enqueue_in() takes a psycopg 3 Connection, got {type(conn).__name__}; "
            "under Django use transaction.atomic() on the jobs database instead"
        )
    token = _current.set(conn)
    try:
        yield conn
    finally:
        _current.reset(token)


def current_connection(
    jobs_dsn_params: dict[str, Any] | None = None,
) -> psycopg.Connection[Any] | None:
    """The connection an enqueue must join now, if any: ``enqueue_in``'s, else Django's when it
    is inside ``atomic()`` on the jobs database."""
    conn = _current.get()
    if conn is not None:
        return conn
    return _django_atomic_connection(jobs_dsn_params)


def _django_atomic_connection(
    jobs_dsn_params: dict[str, Any] | None,
) -> psycopg.Connection[Any] | None:
    import sys

    if "django.db" not in sys.modules or jobs_dsn_params is None:
        return None  # Django is not in use: never import it just to look
    from django.db import connections

    for alias in connections:
        wrapper = connections[alias]
        if wrapper.vendor != "postgresql" or not wrapper.in_atomic_block:
            continue
        raw = wrapper.connection
        if not isinstance(raw, psycopg.Connection):
            continue  # psycopg2: cannot share its transaction with psycopg 3
        if same_database(raw.info.get_parameters(), raw.info, jobs_dsn_params):
            return raw
    return None


def same_database(_params: dict[str, str], info: Any, jobs: dict[str, Any]) -> bool:
    """True when a live connection points at the jobs database (host, port and name)."""
    host = str(jobs.get("host") or "localhost")
    mine = str(info.host or "localhost")
    local = {"localhost", "127.0.0.1", "::1"}
    same_host = host == mine or (host in local and mine in local) or host.startswith("/")
    return (
        same_host
        and str(jobs.get("port") or 5432) == str(info.port or 5432)
        and str(jobs.get("dbname") or "") == str(info.dbname or "")
    )
