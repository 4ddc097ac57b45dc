"""A Celery app whose config sets the worker's size the Celery way (``worker_concurrency``,
``worker_prefetch_multiplier``), for ``ujobs-bridge worker -A`` to honour."""

from __future__ import annotations

import types

from celery_compat import Celery

app = Celery("celery_worker_settings")
# Django-style: read from a settings object under the CELERY_ namespace.
app.config_from_object(
    types.SimpleNamespace(CELERY_WORKER_CONCURRENCY=3, CELERY_WORKER_PREFETCH_MULTIPLIER=2),
    namespace="CELERY",
)
app.conf.task_default_queue = "settings"


@app.task
def noop() -> None:
    return None
