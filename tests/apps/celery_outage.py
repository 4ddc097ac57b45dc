"""A Celery app whose tasks wait at a gate file, run by a real worker process while
``test_outages.py`` restarts the database under it (``UJOBS_TEST_MARKS``: see outage_jobs)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from celery_compat import Celery
from ujobs_bridge import current_job

app = Celery("celery_outage")
app.conf.task_default_queue = "couts"


@app.task
def gated(key: str, x: int) -> int:
    marks = Path(os.environ["UJOBS_TEST_MARKS"])
    (marks / f"start-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}").touch()  # one per run
    while not (marks / f"gate-{key}").exists():
        current_job().wait(0.05)
    return x * 2
