"""The revoked task ids a worker process holds in memory, so a message it already claimed is
dropped before its body starts when its id is revoked, at no query per task.

Why it exists: ``control.revoke`` cancels a task's rows that no worker holds, but a worker
claims messages ahead of its free body slots (its prefetch) and holds them in state
``running``. Celery's worker keeps revoked ids in memory and checks each request just before
running it: a revoked task that has not started never runs. This module is that set for the
bridge worker. It rides on the worker's own LISTEN connection: the Celery loader
(``loading.py``) hands ``channel()`` to the worker, whose listener (``ujobs_bridge._internal.worker.listener``)
carries it; on every (re)connection it LISTENs on ``x_celery_revoked`` and then loads
the ids revoked within the window (the purge's retention; older revoke rows are deleted anyway),
so nothing revoked while nobody listened is missed; after that, ``revoke()`` NOTIFYs each id in
the statement that records it. A revoked id re-claimed later (rescued after a worker died,
handed back by a drain) is therefore known to any worker that starts afterwards. Ids leave the
set once older than the window, so a long-lived worker's memory stays bounded.

While no listener of the process is connected (a worker driven by ``tick()``, a listener
reconnecting), a notification could be missed, so the answer comes from the table instead: one
primary-key lookup per task until the listener is back.

``listed`` is what ``inspect revoked`` (and a Celery worker's Mingle ``hello``) answers: this set,
and the task ids whose rows were cancelled from the engine's side (``ujobs-bridge jobs cancel``,
the dashboard's cancel), which the engine records on the job row as every cancel; read from the
rows when asked, so a requeued job is no longer listed. Those ids do not join the set: the
engine's cancel already keeps their rows from running, and a requeue must be able to run them.

What it is not: the revoke (``control.py``) or what a revoked request does (``execution.py``,
``worker_request.py``: REVOKED and ``task_revoked``, as Celery's worker). It is per process,
like Celery's: ids are task ids, not database-qualified.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from celery_compat.db import message_jobs, revocations
from ujobs_bridge.ext.retention import DEFAULT_OLDER_THAN_S
from ujobs_bridge.ext.worker import ExtraChannel

CHANNEL = "x_celery_revoked"
log = logging.getLogger("ujobs.control")

WINDOW_S = DEFAULT_OLDER_THAN_S


class RevokedIds:
    """A bounded set of revoked task ids, kept current by the listener hooks below."""

    def __init__(
        self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        # task id -> monotonic instant it leaves the set; insertion order is (about) age order
        self._until: dict[str, float] = {}
        self._live = 0

    @property
    def live(self) -> bool:
        """True while at least one listener of this process is connected and caught up."""
        return self._live > 0

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._until

    def __len__(self) -> int:
        return len(self._until)

    def ids(self) -> list[str]:
        """The ids known revoked (within the window), oldest first (``inspect revoked``)."""
        with self._lock:
            self._prune(self._clock())
            return list(self._until)

    def add(self, entries: Iterable[tuple[str, float]]) -> None:
        """Add ``(task id, age in seconds)`` pairs; ids already known keep their age."""
        now = self._clock()
        with self._lock:
            for task_id, age_s in entries:
                self._until.setdefault(task_id, now + self.window_s - age_s)
            self._prune(now)

    def _prune(self, now: float) -> None:
        until = self._until
        while until:
            oldest = next(iter(until))
            if until[oldest] > now:
                return
            del until[oldest]

    def is_revoked(self, app: Any, task_id: str) -> bool:
        """Was ``task_id`` revoked? From memory while a listener is live, else from the table."""
        if self.live:
            return task_id in self._until
        with app.ujobs_client.pool.connection() as conn:
            return revocations.revoked_terminate(conn, task_id) is not None

    # -- the listener's hooks (its thread) -----------------------------------------------------

    def on_connect(self, conn: psycopg.Connection[Any]) -> None:
        revocations.listen_revoked(conn)  # first, so nothing committed after the load is missed
        self.add(revocations.revoked_recent(conn, self.window_s))
        with self._lock:
            self._live += 1

    def on_notify(self, payload: str) -> None:
        if payload:
            self.add([(payload, 0.0)])

    def on_closed(self) -> None:
        with self._lock:
            self._live = max(0, self._live - 1)


REVOKED = RevokedIds()

# Celery's worker keeps at most this many revoked ids (celery.worker.state.REVOKES_MAX).
LISTED_MAX = 50_000


def listed(app: Any) -> list[str]:
    """The ids ``inspect revoked`` lists, oldest first: the revoked ones this process knows,
    then the tasks cancelled from the engine's side within the window (see the module
    docstring). With the database out of reach, the ones in memory."""
    ids = REVOKED.ids()
    try:
        with app.ujobs_client.pool.connection() as conn:
            cancelled = message_jobs.cancelled_recent(conn, REVOKED.window_s, LISTED_MAX)
    except psycopg.Error as exc:
        log.debug("inspect revoked: cancelled jobs not read (%s)", exc)
        return ids
    known = set(ids)
    return ids + [tid for tid, _age in cancelled if tid not in known]


def channel() -> ExtraChannel:
    """The LISTEN channel that keeps ``REVOKED`` current, for a worker's listener to carry
    (``Worker(..., channels=...)``)."""
    return ExtraChannel(CHANNEL, REVOKED.on_connect, REVOKED.on_notify, REVOKED.on_closed)
