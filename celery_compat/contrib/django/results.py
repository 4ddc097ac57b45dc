"""django-celery-results kept: with ``CELERY_RESULT_BACKEND = "django-db"`` a celery_compat app
stores its results in django-celery-results' ``TaskResult`` and ``GroupResult`` rows, written by
that package's own backend, so the views, admin pages and queries a Django project has over them
keep working after the cutover (and a Celery worker still running other tasks writes the same
table).

Why it exists: ``celery_compat.Celery`` otherwise keeps results in ``x_celery_results``, which
no Django code reads. The rows are written by django-celery-results' ``DatabaseBackend`` itself
(status, result, traceback, ``meta``, ``content_type``/``content_encoding``, and with
``result_extended``: ``task_name``, ``task_args``/``task_kwargs``, ``worker``,
``periodic_task_name``; ``date_started`` with ``task_track_started``), since the bridge worker
runs tasks through Celery's own tracer with the message's request. What is ours:

* an id whose row is not final (none, PENDING, STARTED, RETRY) is answered from its job rows,
  as on the Postgres backend: a message the engine dead-lettered reads FAILURE
  (``WorkerLostError``, or ``NotRegistered`` when no live worker had the task), a revoked one
  REVOKED;
* a chord's ``ChordCounter`` counts the header parts that have FINISHED (their ``TaskResult``
  rows in a ready state), under the same row lock, instead of decrementing once per call: a
  part delivered twice (the engine delivers at least once) cannot fire the body twice or early.
  ``count`` still reads how many parts are left, the row is deleted when the body is sent, and
  the body is sent as django-celery-results sends it (``trigger_callback``).

What it is not: a second store. Nothing is written to ``x_celery_results`` for such an app;
``get()`` polls the row at its ``interval`` (no NOTIFY comes from a Django write); a result
is not held to ``--max-result-bytes``; expired rows go by Celery's ``celery.backend_cleanup``
task (which Celery's beat adds by itself, the bridge's scheduler does not); a result
write that fails in a database outage is not retried through it (Celery's
``result_backend_always_retry`` covers Django's ``InterfaceError`` as django-celery-results
documents). Importing this module needs Django configured (it imports the models).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import maybe_signature, states
from django.db import router, transaction
from django_celery_results.backends.database import DatabaseBackend, trigger_callback
from django_celery_results.models import ChordCounter

from celery_compat.backend.outage import stored
from celery_compat.backend.postgres import meta_from_jobs
from celery_compat.db import message_jobs

logger = logging.getLogger(__name__)


def _leaves(result: Any) -> list[str]:
    """The task ids of a header's results, nested groups flattened (the parts that report)."""
    parts = getattr(result, "results", None)
    if parts is None:
        return [str(result.id)]
    return [tid for part in parts for tid in _leaves(part)]


class DjangoResultsBackend(DatabaseBackend):  # type: ignore[misc]
    """``django-db`` for celery_compat apps: django-celery-results' rows, the engine's answers."""

    def close(self) -> None:
        """Nothing of its own to close: the rows are written on Django's connections."""

    def _get_task_meta_for(self, task_id: Any) -> dict[str, Any]:
        meta: dict[str, Any] = super()._get_task_meta_for(task_id)
        if meta.get("status") in states.READY_STATES:
            return meta
        tid = str(task_id)
        client = self.app.ujobs_client
        rows = stored(client, lambda conn: message_jobs.jobs_of_task(conn, tid))
        if rows:
            return meta_from_jobs(self, tid, rows) or meta
        return meta

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> None:
        """Count the header's finished parts under the ``ChordCounter`` row's lock; the call that
        finds them all finished deletes the row and sends the body. A call that finds no row
        comes after the body was sent (a part delivered again, or one that finished while
        another call counted it): nothing to do."""
        tid, gid = request.id, request.group
        if not gid or not tid:
            return
        using = router.db_for_write(ChordCounter)
        with transaction.atomic(using=using):
            counter = ChordCounter.objects.using(using).select_for_update().filter(group_id=gid)
            found = counter.first()
            if found is None:
                logger.debug("chord %s: its body was already sent", gid)
                return
            deps = found.group_result(app=self.app)
            parts = _leaves(deps)
            results = self.TaskModel._default_manager.using(router.db_for_write(self.TaskModel))
            finished = results.filter(task_id__in=parts, status__in=states.READY_STATES).count()
            left = len(parts) - finished
            if left > 0:
                if found.count != left:
                    found.count = left
                    found.save(update_fields=["count"])
                return
            found.delete()
        callback = maybe_signature(request.chord, app=self.app)
        trigger_callback(app=self.app, callback=callback, group_result=deps)
