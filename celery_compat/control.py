"""``app.control`` for celery_compat apps: revoke is a durable row change, not a broadcast.

Why it exists: Celery's ``revoke`` broadcasts to the workers alive at that moment and lives in
their memory (a restarted worker forgets it). Here a revoke is written to ``x_celery_revoked``
and applied to the task's job rows: a job that has not started is cancelled and never runs, a
message sent later for the same id is born cancelled, a message a worker already claimed is
dropped by that worker before its body starts (the revoke is NOTIFYed with its insert,
``revoked_ids.py``), and ``terminate=True`` cancels a running job, whose worker interrupts the
body (``execution.py``) and records REVOKED.

What it is not: a remote-control channel. ``inspect()``/``broadcast`` keep Celery's behaviour
(they need a broker and answer only for Celery workers); ``ping()`` answers here from nothing
more than the database being reachable.
"""

from __future__ import annotations

from typing import Any

from celery import states
from celery.app.control import Control
from celery.exceptions import TaskRevokedError
from celery.utils.functional import maybe_list

from ujobs_bridge.db import jobs as driver

from .db import message_jobs, result_store, revocations

LIVE_NOT_RUNNING = ("ready", "sleeping", "waiting")
REVOCABLE_STATES = (states.PENDING, states.RECEIVED, states.RETRY, states.REJECTED)


class BridgeControl(Control):  # type: ignore[misc]
    def revoke(
        self,
        task_id: Any,
        destination: Any = None,
        terminate: bool = False,
        signal: str = "SIGTERM",
        **kwargs: Any,
    ) -> list[dict[str, Any]] | None:
        ids = [str(t) for t in maybe_list(task_id) or []]
        backend = self.app.backend
        with self.app.ujobs_client.pool.connection() as conn:
            for tid in ids:
                revocations.revoke(conn, tid, terminate=terminate)
                running = False
                for job_id, state, _error, _at in message_jobs.jobs_of_task(conn, tid):
                    if state in LIVE_NOT_RUNNING:
                        driver.job_cancel(conn, job_id, "UJ_JOB_CANCELLED: revoked")
                    elif state == "running":
                        running = True
                        if terminate:
                            # The worker drops it if its body has not started yet, and
                            # interrupts the body if it has (execution._terminates), then
                            # stores REVOKED. Without terminate the row stays as it is: a
                            # started body finishes, as in Celery, and a claimed one whose
                            # body has not started is dropped by its worker, which stores
                            # REVOKED (revoked_ids.py, execution.run_message).
                            driver.job_cancel(conn, job_id, f"UJ_JOB_CANCELLED: revoked ({signal})")
                if not running:
                    self._mark_revoked(backend, tid)
        if kwargs.get("reply"):  # Celery: one reply per worker that handled the broadcast
            return [{"ujobs-bridge": {"ok": f"tasks {set(ids)} flagged as revoked"}}]
        return None

    def _mark_revoked(self, backend: Any, task_id: str) -> None:
        """Store REVOKED as Celery 5.7's worker does: only over a state no worker owns yet (a
        result, or STARTED/a custom state set by a running task, is left alone)."""
        meta = backend.get_task_meta(task_id, cache=False)
        if meta.get("status") in REVOCABLE_STATES:
            backend.store_result(task_id, TaskRevokedError("revoked"), states.REVOKED)

    def ping(self, destination: Any = None, timeout: float = 1.0, **kwargs: Any) -> list[Any]:
        with self.app.ujobs_client.pool.connection() as conn:
            result_store.result_get(
                conn, "celery-compat-ping"
            )  # a round trip proves the database answers
        return [{"ujobs-bridge": {"ok": "pong"}}]
