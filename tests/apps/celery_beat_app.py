"""A plain module Celery app with a ``beat_schedule`` for the beat tests (``tests/test_celery_beat.py``).

Entries cover what real apps write: a number of seconds, a crontab with queue/priority options,
Celery's first-Monday day AND, a minutely crontab that replays every missed run
(``ujobs_catch_up="all"``), an interval for a task this app does not register (sent by name),
and entries added by ``add_periodic_task`` in ``on_after_configure`` and ``on_after_finalize``.
``stamp`` returns what the task saw in ``self.request``, so a test can read the occurrence the
scheduler sent.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery.schedules import crontab

from celery_compat import Celery

app = Celery("celery_beat_app")
app.conf.update(
    task_default_queue="celery",
    timezone="UTC",
    beat_schedule={
        "stamp every 7s": {"task": "beat.stamp", "schedule": 7, "args": ("seven",)},
        "nightly-report": {
            "task": "beat.stamp",
            "schedule": crontab(minute=30, hour=2),
            "args": ("nightly",),
            "kwargs": {"extra": 1},
            "options": {"queue": "reports", "priority": 5, "headers": {"origin": "beat"}},
        },
        "first-monday": {
            "task": "beat.stamp",
            "schedule": crontab(0, 0, day_of_month="1-7", day_of_week=1),
            "args": ("first-monday",),
        },
        "minutely-all": {
            "task": "beat.stamp",
            "schedule": crontab(),
            "args": ("minutely",),
            "options": {"ujobs_catch_up": "all", "ujobs_max_catch_up": 50},
        },
        "cleanup-elsewhere": {
            "task": "elsewhere.cleanup",
            "schedule": timedelta(hours=1),
            "kwargs": {"older_than_days": 30},
            "options": {"expires": 600},
        },
    },
)


@app.task(bind=True, name="beat.stamp")
def stamp(self: Any, label: str, extra: Any = None) -> dict[str, Any]:
    return {
        "label": label,
        "extra": extra,
        "occurrence": self.request.ujobs_occurrence,
        "catch_up": self.request.ujobs_catch_up,
        "beat": self.request.celery_beat_task,
        "id": self.request.id,
        "headers": dict(self.request.headers or {}),
    }


@app.on_after_configure.connect
def _configured(sender: Any, **_: Any) -> None:
    sender.add_periodic_task(45 * 60, stamp.s("configured"), name="every 45 min")


@app.on_after_finalize.connect
def _finalized(sender: Any, **_: Any) -> None:
    sender.add_periodic_task(crontab(minute="*/15"), stamp.s("finalized"), name="quarter-hourly")
