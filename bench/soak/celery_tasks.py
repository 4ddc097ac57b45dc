"""The soak's Celery tasks on the bridge (``-A bench.soak.celery_tasks`` for the Celery workers
and for ``migrate``).

Why it exists: the Celery workload is an unchanged-looking Celery module on ``celery_compat``:
an app, ``bind=True`` tasks, ``self.retry`` for the planned failures (a retry is a new message
under the same task id), a poison task whose exception must end in FAILURE, and results stored
(``AsyncResult`` reads them back). ``soak.task`` is sent with ``.delay()`` by the soak process;
``soak.migrated`` is published by REAL Celery to Redis (``source``) and reaches the bridge
through ``migrate --follow``, which accepts only task names this app declares. Each call is
bracketed by ``marks.execution`` keyed by its job row (one row per message). ``soak.probe`` is
the slot probe (``marks.probe``), sent to one worker's own queue at the end.

What it is not: realistic work; bodies sleep ``work_ms`` to keep some in flight under faults.
"""

from __future__ import annotations

import time
from typing import Any

from celery_compat import Celery
from ujobs_bridge import current_job

from . import mix
from .marks import PlannedPoison, execution, probe

QUEUE = "soak_celery"
MAX_RETRIES = 10

app = Celery("soak")
app.conf.update(
    task_default_queue=QUEUE,
    # Claims before a message whose worker keeps dying is dead-lettered: high, so that the
    # soak's SIGKILLs cannot exhaust it (a dead message here is a finding, not the policy).
    ujobs_max_deliveries=25,
    result_expires=None,
)


def _body(task: Any, workload: str, key: str, fail: int, work_ms: int) -> dict[str, str]:
    ctx = current_job()
    retries = int(task.request.retries or 0)
    with execution(workload, ctx, key=key, retries=retries):
        time.sleep(work_ms / 1000)
        if fail == mix.POISON:
            raise PlannedPoison(f"poison {key}")
        if retries < fail:
            raise task.retry(countdown=0.2, max_retries=MAX_RETRIES)
    return {"key": key}


@app.task(name="soak.task", bind=True)  # type: ignore[untyped-decorator]
def soak_task(self: Any, key: str, fail: int, work_ms: int) -> dict[str, str]:
    return _body(self, "celery", key, fail, work_ms)


@app.task(name="soak.migrated", bind=True)  # type: ignore[untyped-decorator]
def soak_migrated(self: Any, key: str, fail: int, work_ms: int) -> dict[str, str]:
    return _body(self, "migrated", key, fail, work_ms)


@app.task(name="soak.probe")  # type: ignore[untyped-decorator]
def soak_probe(worker: str, expect: int) -> int:
    return probe(worker, expect)
