"""A Celery app that picks its pool in its settings (``worker_pool="solo"``) and sets a worker
setting with no effect on the bridge (``worker_state_db``), for ``ujobs-bridge worker -A``."""

from __future__ import annotations

import types

from celery_compat import Celery

app = Celery("celery_worker_pool")
app.config_from_object(
    types.SimpleNamespace(
        CELERY_WORKER_POOL="solo",
        CELERY_WORKER_CONCURRENCY=4,
        CELERY_WORKER_STATE_DB="/var/run/celery/worker.state",
    ),
    namespace="CELERY",
)
app.conf.task_default_queue = "pool_settings"


@app.task
def noop() -> None:
    return None
