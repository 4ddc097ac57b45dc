"""``Manager`` for integration tests (``celery.contrib.testing.manager``), answered from job rows.

Why it exists: Celery's integration tests drive everything through ``Manager(app)``: ``join``,
``wait_for``, ``assert_accepted``/``assert_received`` (which ask the workers over the broker
with ``inspect().query_task``), ``inspect().ping()``/``active()`` and ``wait_until_idle`` (purge
the broker queue, then wait for no active task). A celery_compat app has no broker and its
worker no remote-control channel, so this subclass keeps Celery's helpers and answers the
worker questions from what the database knows: a task whose job row is ``running`` is
``active``, one whose row finished is ``ready``; ``ping`` answers for the in-process
``start_worker`` worker while it runs; purge cancels the rows that are due and not started.

What it is not: needed any more for remote control. Celery's own ``Manager`` works unchanged
against bridge workers (their nodes answer ``inspect()`` over Postgres; see
``tests/test_celery_contrib.py``); this subclass is kept only because the conformance shim
still uses it (its ``query_task`` also reports finished rows as ``ready``), until the
conformance run is switched to Celery's Manager.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from celery import states
from celery.contrib.testing.manager import Manager as CeleryManager

from celery_compat.db import message_jobs
from celery_compat.message_row import from_input, is_celery_input
from ujobs_bridge.db import jobs as driver

IDLE_WAIT_S = 30.0
LIST_LIMIT = 10_000
FINISHED = ("done", "dead", "cancelled")


def _task_id(record: Any) -> str | None:
    if not is_celery_input(record.input):
        return None
    value = from_input(record.input, queue=record.queue).headers.get("id")
    return None if value is None else str(value)


class BridgeInspect:
    """The subset of ``app.control.inspect()`` integration tests call, from job rows."""

    def __init__(self, app: Any, hostname: str, alive: bool) -> None:
        self.app = app
        self.hostname = hostname
        self.alive = alive

    def _records(self, state: str) -> list[Any]:
        with self.app.ujobs_client.pool.connection() as conn:
            return driver.job_list(conn, state=state, queue=None, name=None, limit=LIST_LIMIT)

    def _reply(self, value: Any) -> dict[str, Any] | None:
        return {self.hostname: value} if self.alive else None

    def ping(self, destination: Any = None) -> dict[str, Any] | None:
        return self._reply({"ok": "pong"})

    def active(self, safe: Any = None) -> dict[str, Any] | None:
        rows = self._records("running")
        return self._reply([self._request_info(r) for r in rows])

    def reserved(self, safe: Any = None) -> dict[str, Any] | None:
        return self._reply([])

    def scheduled(self, safe: Any = None) -> dict[str, Any] | None:
        now = datetime.now(UTC)
        rows = [r for r in self._records("ready") if r.run_at > now]
        return self._reply(
            [{"eta": r.run_at.isoformat(), "request": self._request_info(r)} for r in rows]
        )

    def stats(self) -> dict[str, Any] | None:
        with self.app.ujobs_client.pool.connection() as conn:
            counts = driver.job_stats(conn)
        total: dict[str, int] = {}
        for stat in counts:
            total[stat.queue] = total.get(stat.queue, 0) + stat.jobs
        return self._reply({"broker": {"transport": "ujobs-postgres"}, "total": total})

    def query_task(self, *ids: Any) -> dict[str, Any] | None:
        flat: list[str] = []
        for item in ids:
            flat.extend(str(i) for i in (item if isinstance(item, list | tuple) else [item]))
        answer: dict[str, Any] = {}
        with self.app.ujobs_client.pool.connection() as conn:
            for task_id in flat:
                rows = message_jobs.jobs_of_task(conn, task_id)
                if not rows:  # done rows are not listed: a done task has its stored result
                    if self.app.AsyncResult(task_id).state in states.READY_STATES:
                        answer[task_id] = ["ready", {"id": task_id}]
                    continue
                state = rows[0][1]
                if state == "running":
                    answer[task_id] = ["active", {"id": task_id}]
                elif state in FINISHED:
                    answer[task_id] = ["ready", {"id": task_id}]
        return self._reply(answer)

    @staticmethod
    def _request_info(record: Any) -> dict[str, Any]:
        message = (
            from_input(record.input, queue=record.queue) if is_celery_input(record.input) else None
        )
        return {
            "id": _task_id(record),
            "name": record.name,
            "args": None if message is None else message.args,
            "kwargs": None if message is None else message.kwargs,
            "delivery_info": {"routing_key": record.queue},
            "worker_pid": None,
        }


class Manager(CeleryManager):  # type: ignore[misc]
    """Celery's test ``Manager``; worker questions are answered from the jobs database."""

    def __init__(self, app: Any, worker: Any = None, **kwargs: Any) -> None:
        self.worker = worker
        super().__init__(app, **kwargs)

    def _alive(self) -> bool:
        bridge = getattr(self.worker, "worker", None)
        return bridge is not None and not bridge.stopping

    def inspect(self, timeout: float = 3.0) -> BridgeInspect:
        hostname = str(getattr(self.worker, "hostname", None) or "ujobs@test")
        return BridgeInspect(self.app, hostname, self._alive())

    def purge(self) -> int:
        """Cancel the jobs that are due and not started (Celery: drop the queued messages)."""
        now = datetime.now(UTC)
        purged = 0
        with self.app.ujobs_client.pool.connection() as conn:
            for record in driver.job_list(
                conn, state="ready", queue=None, name=None, limit=LIST_LIMIT
            ):
                if record.run_at <= now and driver.job_cancel(conn, record.id, "purged"):
                    purged += 1
        return purged

    def wait_until_idle(self, timeout: float = IDLE_WAIT_S) -> None:
        """Purge what is queued and wait (at most ``timeout``) until nothing runs; purging again
        on each look, so a message that goes back to the queue (``Reject(requeue=True)``, a
        retry) cannot keep the worker busy."""
        inspect = self.inspect()
        pause = threading.Event()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while self.purge():
                pass
            active = inspect.active() or {}
            if not any(active.values()):
                return
            pause.wait(0.05)


__all__ = ["BridgeInspect", "Manager"]
