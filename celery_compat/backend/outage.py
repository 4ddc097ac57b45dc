"""Result writes through a database outage: retried, and never turned into a task's FAILURE.

Why it exists: Celery's tracer stores a task's result after its body returned; a store that
raises (a pooled connection the server closed in a restart, "the database system is starting
up") makes the tracer record FAILURE, and the row would go ``dead``, though the task succeeded.
So each statement of the result backend runs through ``stored``: on a checked connection (the
pool never hands out a dead one), an infrastructure error retried with backoff for as long as
the attempt keeps its lease (``RESULT_RETRY_S`` at most). If the database stays away longer,
the outage is remembered for this thread, and ``raise_if_outage`` (called by the executor after
the tracer) hands the attempt back uncounted instead of failing the task: it runs again once
the database is back (at least once, as Celery's ``acks_late``).

What it is not: the statements (``db/result_store.py``) or the backend (``backend.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg

from ujobs_bridge.client import Client
from ujobs_bridge.errors import DatabaseUnavailableError
from ujobs_bridge.ext.database import retrying, transient
from ujobs_bridge.ext.jobs import current_job

T = TypeVar("T")
RESULT_RETRY_S = 60.0

_SEEN = threading.local()


def _attempt_stopped() -> bool:
    """True inside a body whose attempt was stopped (its lease lost): stop retrying."""
    try:
        return current_job().signal.aborted
    except RuntimeError:  # not in a job body (a producer reading a result)
        return False


def stored(client: Client, op: Callable[[psycopg.Connection[Any]], T], *, again: bool = True) -> T:
    """Run ``op`` on a pooled connection; ``again``: retry infrastructure errors (only for a
    statement that is safe to run twice)."""

    def once() -> T:
        with client.pool.connection() as conn:
            return op(conn)

    try:
        if not again:
            return once()
        return retrying(once, within_s=RESULT_RETRY_S, gave_up=_attempt_stopped)
    except psycopg.Error as exc:
        if transient(exc):
            _SEEN.outage = exc
        raise


def forget_outage() -> None:
    """Before a task runs: no outage seen yet on this thread."""
    _SEEN.outage = None


def raise_if_outage(task_id: str) -> None:
    """After the tracer: if a result statement gave up on an outage, hand the attempt back
    (``DatabaseUnavailableError``) rather than let the task read FAILURE."""
    seen: BaseException | None = getattr(_SEEN, "outage", None)
    _SEEN.outage = None
    if seen is not None:
        raise DatabaseUnavailableError(
            f"the result of task {task_id} could not be stored: the database was unavailable"
            f" ({seen})",
            hint="the task is handed back uncounted and runs again once the database is back",
        ) from seen


@contextlib.contextmanager
def outage_handed_back(name: str) -> Iterator[None]:
    """Around a task's run: an infrastructure error that escapes it (a revoke, expiry or time
    limit store Celery's tracer does not wrap) hands the attempt back instead of failing it."""
    try:
        yield
    except psycopg.Error as exc:
        if not transient(exc):
            raise
        raise DatabaseUnavailableError(
            f"the jobs database was unavailable while task {name!r} ended: {exc}",
            hint="the task is handed back uncounted and runs again once it is back",
        ) from exc
