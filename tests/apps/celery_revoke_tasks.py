"""A celery_compat app for the revoke-before-start and redelivery tests: a task that holds its
body until the test opens a gate, a task that only leaves a marker, and one that rejects with
requeue until its message reads ``delivery_info['redelivered']``.

``RAN`` counts what really ran (by label), so a test can tell "never ran" from "ran and its result
was lost"; ``DELIVERIES`` keeps what each run of ``requeue_until_redelivered`` read.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from celery.exceptions import Reject

from celery_compat import Celery

app = Celery("celery_revoke_tasks")
app.conf.update(task_default_queue="celery", result_expires=3600)

RAN: Counter[str] = Counter()
DELIVERIES: list[bool] = []
STARTED = threading.Event()
GATE = threading.Event()


def reset() -> None:
    RAN.clear()
    DELIVERIES.clear()
    STARTED.clear()
    GATE.clear()


@app.task
def hold(label: str) -> str:
    """Runs until GATE opens."""
    RAN[label] += 1
    STARTED.set()
    while not GATE.wait(0.01):
        pass
    RAN[f"{label}:finished"] += 1
    return label


@app.task
def mark(label: str) -> str:
    RAN[label] += 1
    return label


@app.task(bind=True)
def requeue_until_redelivered(self: Any) -> str:
    """Celery's integration test ``test_reject_with_requeue_redelivers_and_succeeds``."""
    redelivered = bool(self.request.delivery_info.get("redelivered"))
    DELIVERIES.append(redelivered)
    if not redelivered:
        raise Reject("first delivery", requeue=True)
    return "redelivered"
