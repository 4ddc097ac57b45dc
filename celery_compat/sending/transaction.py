"""Enqueue inside the caller's database transaction: ``with enqueue_in(conn): task.delay()``.

Why it exists: the reason to put Celery's queue in Postgres is that a task can commit or roll
back WITH the write that makes it meaningful, with no ``on_commit`` dual write. Inside
``enqueue_in(conn)`` every message the facade sends is inserted on ``conn`` (a psycopg 3
connection, in its open transaction). Under Django, ``transaction.atomic()`` (or autocommit
turned off) on a database that is the jobs database does the same without any wrapper, when
Django uses psycopg 3; with psycopg2 it cannot share the transaction and says so once in the log.

What it is not: a transaction manager. It never begins, commits or rolls back anything; the
caller's transaction decides.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from celery_compat.db import message_jobs

log = logging.getLogger(__name__)

# (message, its input text, max attempts, its send key) held by enqueue_in(batch=True).
Held = tuple[Any, str, int, Any]
_batch: contextvars.ContextVar[list[Held] | None] = contextvars.ContextVar(
    "celery_compat_enqueue_batch", default=None
)
_current: contextvars.ContextVar[psycopg.Connection[Any] | None] = contextvars.ContextVar(
    "celery_compat_enqueue_conn", default=None
)


@contextmanager
def enqueue_in(
    conn: psycopg.Connection[Any], *, batch: bool = False
) -> Iterator[psycopg.Connection[Any]]:
    """Send every task inside this block on ``conn``, in its transaction.

    With ``batch=True`` the messages are held and written in ONE statement when the block exits
    normally (an exception inside the block writes none of them): much faster for many sends,
    but the rows exist only after the block, so commit after it, not inside it."""
    if not isinstance(conn, psycopg.Connection):
        raise TypeError(
            f"enqueue_in() takes a psycopg 3 Connection, got {type(conn).__name__}; "
            "under Django use transaction.atomic() on the jobs database instead"
        )
    token = _current.set(conn)
    held: list[Held] | None = [] if batch else None
    batch_token = _batch.set(held)
    try:
        yield conn
    finally:
        _batch.reset(batch_token)
        _current.reset(token)
    if held:
        write_held(conn, held)


def write_held(conn: psycopg.Connection[Any], held: list[Held]) -> None:
    """Insert held messages on ``conn``: one statement per distinct max-attempts value."""
    by_attempts: dict[int, list[Held]] = {}
    for item in held:
        by_attempts.setdefault(item[2], []).append(item)
    for max_attempts, items in by_attempts.items():
        message_jobs.enqueue_many(
            conn,
            [m for m, _, _, _ in items],
            max_attempts=max_attempts,
            inputs=[payload for _, payload, _, _ in items],
            keys=[key for _, _, _, key in items],
        )


def batch_hold(message: Any, payload: str, max_attempts: int, key: Any = None) -> bool:
    """Hold ``message`` (sent under ``key``, a ``SendKey`` or None) for the enclosing
    ``enqueue_in(batch=True)``; False if there is none."""
    held = _batch.get()
    if held is None:
        return False
    held.append((message, payload, max_attempts, key))
    return True


def current_connection(
    jobs_database: Callable[[], dict[str, Any] | None] | None = None,
) -> psycopg.Connection[Any] | None:
    """The connection an enqueue must join now, if any: ``enqueue_in``'s, else Django's when it
    is in a transaction (``atomic()``, or autocommit turned off) on the jobs database.

    ``jobs_database`` answers the jobs database's connection parameters (host, port, dbname); it
    is called only when Django holds an open transaction, so a plain enqueue pays nothing."""
    conn = _current.get()
    if conn is not None:
        return conn
    return _django_transaction_connection(jobs_database)


def _django_transaction_connection(
    jobs_database: Callable[[], dict[str, Any] | None] | None,
) -> psycopg.Connection[Any] | None:
    if "django.db" not in sys.modules or jobs_database is None:
        return None  # Django is not in use: never import it just to look
    from django.conf import settings  # optional: Django, already imported by the project

    if not settings.configured:
        return None
    from django.db import connections  # optional: Django (see above)

    jobs: dict[str, Any] | None = None
    for alias in connections:
        wrapper = connections[alias]
        raw = wrapper.connection
        if raw is None or wrapper.vendor != "postgresql":
            continue  # never connected in this thread: no transaction to join
        if not (wrapper.in_atomic_block or not wrapper.autocommit):
            continue
        jobs = jobs if jobs is not None else jobs_database()
        if jobs is None or not same_database(raw.info, jobs):
            continue
        if not isinstance(raw, psycopg.Connection):
            _warn_psycopg2_once(alias)
            continue  # psycopg2: cannot share its transaction with psycopg 3
        return raw
    return None


_warned: set[str] = set()


def _warn_psycopg2_once(alias: str) -> None:
    if alias not in _warned:
        _warned.add(alias)
        log.warning(
            "Django database %r is the jobs database but uses psycopg2: tasks sent inside its "
            "atomic() blocks are committed at once, not with the block (install psycopg 3, or "
            "wrap the block in celery_compat.enqueue_in(conn) with a psycopg 3 connection)",
            alias,
        )


def same_database(info: Any, jobs: dict[str, Any]) -> bool:
    """True when a live connection (its ``.info``) points at the jobs database (host, port, name)."""
    host = str(jobs.get("host") or "localhost")
    mine = str(info.host or "localhost")
    local = {"localhost", "127.0.0.1", "::1"}
    same_host = host == mine or (host in local and mine in local) or host.startswith("/")
    return (
        same_host
        and str(jobs.get("port") or 5432) == str(info.port or 5432)
        and str(jobs.get("dbname") or "") == str(info.dbname or "")
    )
