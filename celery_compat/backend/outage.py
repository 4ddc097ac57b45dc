"""Result writes through a database outage: retried, and never turned into a task's FAILURE.

Why it exists: Celery's tracer stores a task's result after its body returned; a store that
raises (a pooled connection the server closed in a restart, "the database system is starting
up") makes the tracer record FAILURE, and the row would go ``dead``, though the task succeeded.
So each statement of the result backend runs through ``stored``: on a checked connection (the
pool never hands out a dead one), an infrastructure error retried with backoff. Inside a task
the write waits out an outage of up to ``TASK_OUTAGE_S`` (a lease cannot run out while the
database is down, so the finished task keeps its result): it stops early only when the attempt
is stopped for certain (its lease taken, the job cancelled, the worker shutting down), not when
the worker merely could not renew the lease while the database was away. Outside a task (a
producer reading a result) it retries for ``RESULT_RETRY_S``. If the database stays away longer,
the outage is remembered for this thread, and ``raise_if_outage`` (called by the executor after
the tracer) hands the attempt back uncounted instead of failing the task: it runs again once
the database is back (at least once, as Celery's ``acks_late``).

What it is not: the statements (``db/result_store.py``) or the backend (``backend.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from ujobs_bridge.client import Client
from ujobs_bridge.errors import DatabaseUnavailableError
from ujobs_bridge.ext.database import retrying, transient
from ujobs_bridge.ext.jobs import current_job

T = TypeVar("T")
RESULT_RETRY_S = 60.0  # outside a task
TASK_OUTAGE_S = 900.0  # inside a task: the longest outage a finished task's result waits out

_SEEN = threading.local()


def _in_task() -> bool:
    try:
        current_job()
    except RuntimeError:  # not in a job body (a producer reading a result)
        return False
    return True


def _attempt_stopped() -> bool:
    """True inside a body whose attempt was stopped for certain (its lease taken, the job
    cancelled, the worker draining): stop retrying. A lease the worker could not renew while
    the database was away is not certain: the write keeps trying, fenced later by its token."""
    try:
        signal = current_job().signal
    except RuntimeError:
        return False
    return signal.aborted and signal.certain


def stored(client: Client, op: Callable[[psycopg.Connection[Any]], T], *, again: bool = True) -> T:
    """Run ``op`` on a pooled connection; ``again``: retry infrastructure errors (only for a
    statement that is safe to run twice)."""

    def once() -> T:
        with client.pool.connection() as conn:
            return op(conn)

    try:
        if not again:
            return once()
        within_s = TASK_OUTAGE_S if _in_task() else RESULT_RETRY_S
        return retrying(once, within_s=within_s, gave_up=_attempt_stopped)
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


class outage_handed_back:
    """Around a task's run: an infrastructure error that escapes it (a revoke, expiry or time
    limit store Celery's tracer does not wrap) hands the attempt back instead of failing it.
    (A class rather than a generator: it is entered once per task run.)"""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, psycopg.Error) and transient(exc):
            raise DatabaseUnavailableError(
                f"the jobs database was unavailable while task {self._name!r} ended: {exc}",
                hint="the task is handed back uncounted and runs again once it is back",
            ) from exc
