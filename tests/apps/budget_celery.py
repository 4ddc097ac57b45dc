"""The celery_compat app of the connection-budget and PgBouncer tests: its database is
``UJOBS_DATABASE_URL`` (the test's, or the same database through PgBouncer); ``add`` stores a
result, ``slow_add`` holds its body slot a moment so results are written concurrently."""

from __future__ import annotations

import threading

from celery_compat import Celery

app = Celery("budget_celery")
app.conf.update(task_default_queue="budget-celery", result_expires=3600)
_pause = threading.Event()  # never set: ``wait`` is how a body holds its slot


@app.task(name="budget.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="budget.slow_add")
def slow_add(x: int, y: int, hold_s: float = 0.05) -> int:
    _pause.wait(hold_s)
    return x + y
