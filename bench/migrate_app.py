"""The plain Celery app whose backlog the migrate cell drains (``ujobs-bridge migrate -A bench.migrate_app``).

Why it exists: the drain-rate figure must be for messages REAL Celery wrote, so the bench
publishes with an ordinary ``celery.Celery`` app (no celery_compat) to Redis or RabbitMQ, and
the drainer, a subprocess, loads the same module as its ``-A`` (the app is where it learns which
task names are known). The producer side builds its app with ``make_app``; the ``migrate``
subprocess reads broker and queue from ``BENCH_MIGRATE_BROKER`` / ``BENCH_MIGRATE_QUEUE`` (and
is also given ``--broker`` and ``-Q`` explicitly). Settings are Celery's defaults plus
``task_ignore_result=True``, as in ``bench.celery_app``.

What it is not: a worker app. The task bodies never run here: the cell measures moving the
backlog into Postgres, not executing it.
"""

from __future__ import annotations

import os

from celery import Celery

NOOP = "ujb_bench_migrate.noop"


def make_app(*, broker: str, queue: str) -> Celery:
    app = Celery("ujb_bench_migrate", broker=broker, set_as_current=False)
    app.conf.update(
        task_ignore_result=True,
        task_default_queue=queue,
        broker_connection_retry_on_startup=True,
    )

    @app.task(name=NOOP, shared=False)
    def noop(i: int = 0) -> None:
        return None

    return app


app = make_app(
    broker=os.environ.get("BENCH_MIGRATE_BROKER", "redis://127.0.0.1:6379/7"),
    queue=os.environ.get("BENCH_MIGRATE_QUEUE", "ujb_bench_migrate_unset"),
)
