"""The Celery-shaped tasks the bench runs on the bridge (``ujobs-bridge worker -A bench.compat_tasks``).

Why it exists: the Celery-shaped cells measure an unchanged Celery codebase on the bridge, so
this module is written the way a Celery user writes one: a ``celery_compat.Celery`` app and a
``@shared_task`` no-op. Settings mirror ``bench.celery_app``'s: Celery's defaults plus
``task_ignore_result=True`` (results are not stored on either side). The bench process points
the app at its database with ``app.use_ujobs_client``; the worker subprocess gets ``--dsn``.

What it is not: an example of good task design (the body is empty on purpose), nor the Celery
side of the comparison (that is ``bench.celery_app`` on a real broker).
"""

from __future__ import annotations

from celery_compat import Celery, shared_task

QUEUE = "bench_compat"

app = Celery("ujb_bench_compat")
app.conf.update(task_ignore_result=True, task_default_queue=QUEUE)


@shared_task(name="ujb_bench_compat.noop")
def noop() -> None:
    return None
