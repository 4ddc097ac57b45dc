"""Periodic tasks for ``tests/test_metrics_procs.py`` and ``tests/test_dashboard_ops.py``: daily
tasks whose phase the test may set (``$OBS_ANCHOR``, an ISO instant; default 12:00 UTC), so the
occurrences missed since a watermark the test writes are known exactly and none falls due while
the test runs; and a wall-clock cron in another zone. Nothing runs the jobs."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from ujobs_bridge import job
from ujobs_bridge._internal.scheduling.task import task

QUEUE = "obs-sched"
ANCHOR = datetime.fromisoformat(os.environ.get("OBS_ANCHOR", "2000-01-01T12:00:00+00:00"))


@job(queue=QUEUE)
def daily_report(occurrence: str, catch_up: bool) -> None:
    """What the tasks fire; the body never runs in these tests."""


catch_all = task(
    "obs-all", every=timedelta(days=1), anchor=ANCHOR, catch_up="all", job=daily_report
)
catch_once = task(
    "obs-once", every=timedelta(days=1), anchor=ANCHOR, catch_up="run-once", job=daily_report
)
obs_cron = task("obs-cron", cron="15 3 * * *", tz="Europe/Paris", job=daily_report)
