"""A plain Celery 5 app (``celery.Celery``, not the bridge's) run by a REAL ``celery worker`` on
the cutover broker beside a bridge worker: as it starts, its Mingle step asks every node on the
broker's pidbox for ``hello``, and the bridge worker answers as a Celery worker would. Broker:
``$BESIDE_TEST_BROKER``; it consumes only its own queue, so the bridge's tasks stay the bridge's."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("celery_beside_worker", broker=os.environ.get("BESIDE_TEST_BROKER"))
app.conf.update(task_default_queue="beside", broker_connection_retry_on_startup=True)


@app.task(name="beside.echo")
def echo(value: str) -> str:
    return value
