"""The project's app: the one line changed from Celery's guide is ``from celery_compat import
Celery``. Its database is the app's ``ujobs_database_url``, taken from ``GUIDE_PROJ_DATABASE_URL``
(set by the test), and its broker stays Redis, as during a cutover."""

from __future__ import annotations

import os

from celery_compat import Celery
from ujobs_bridge.testing import redis_url

app = Celery(
    "guide_proj",
    broker=redis_url(11),  # the test kit's server (inherited from the test)
    include=["apps.guide_proj.tasks"],
)
app.conf.ujobs_database_url = os.environ.get("GUIDE_PROJ_DATABASE_URL") or None
app.conf.task_default_queue = "guide"
app.conf.beat_schedule = {
    "guide-add-every-minute": {
        "task": "apps.guide_proj.tasks.add",
        "schedule": 60.0,
        "args": (1, 2),
    }
}
