"""``migrate_proj`` after a deploy: an app that also registers ``migrate_proj.added_later``,
the task a quarantined message named before it existed (for ``migrate quarantine retry``)."""

from __future__ import annotations

from celery_compat import Celery

app = Celery("migrate_proj_v2")
app.conf.update(task_default_queue="celery")


@app.task(name="migrate_proj.add", shared=False)
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="migrate_proj.added_later", shared=False)
def added_later(value: int) -> int:
    return value
