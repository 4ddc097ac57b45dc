"""A Celery app whose task can be held in Celery's prologue (a ``task_prerun`` receiver) or in
its function, for ``test_celery_work_start.py``: each writes to the effect ledger
(``test_effects``) and waits at a gate (``test_gates``), as ``fault_jobs`` bodies do, so the
test SIGKILLs the worker at a known line. One delivery only (``ujobs_max_deliveries=1``): a
charged attempt is a dead job."""

from __future__ import annotations

import os
from typing import Any

from celery.signals import task_prerun

from apps.fault_jobs import hold, record
from celery_compat import Celery

app = Celery("celery_work_start")
app.conf.task_default_queue = "work_start"
app.conf.ujobs_max_deliveries = 1


@task_prerun.connect
def _held_in_prologue(sender: Any = None, args: Any = (), kwargs: Any = None, **_: Any) -> None:
    if getattr(sender, "name", None) == "work_start.held" and kwargs and kwargs.get("prologue"):
        record(args[0], "prerun")
        hold("prerun")


@app.task(name="work_start.held")
def held(key: str, prologue: bool = False) -> dict[str, Any]:
    """Record 'start' (the function's first line), wait at the gate named ``key``, record
    'end'. With ``prologue``, the ``task_prerun`` receiver first records 'prerun' and waits at
    the gate 'prerun'."""
    record(key, "start")
    hold(key)
    record(key, "end")
    return {"key": key, "pid": os.getpid()}
