"""A celery_compat app run by a real ``celery -A apps.celery_handover_app beat`` and then by
``ujobs-bridge scheduler -A apps.celery_handover_app`` (``tests/test_celery_beat_handover.py``).

One entry every second (a timedelta, so the grid matters), a minutely crontab, and a 2 s interval
that replays what beat missed (``ujobs_catch_up="all"``); the queue is its own, and nothing runs the tasks: the test reads the message rows. ``Erratic`` is a custom
schedule class neither scheduler can convert (the fallback test adds it to a copy of the app).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery.schedules import BaseSchedule, crontab, schedstate

from celery_compat import Celery

TICK = "tick every second"
MINUTELY = "minutely"
REPLAY = "replay every 2s"

app = Celery("celery_handover_app")
app.conf.update(
    task_default_queue="handover",
    timezone="UTC",
    beat_max_loop_interval=1,
    beat_schedule={
        TICK: {"task": "handover.tick", "schedule": timedelta(seconds=1), "args": ("tick",)},
        MINUTELY: {"task": "handover.tick", "schedule": crontab(), "args": ("minutely",)},
        REPLAY: {
            "task": "handover.tick",
            "schedule": 2,
            "args": ("replay",),
            "options": {"ujobs_catch_up": "all"},
        },
    },
)


@app.task(name="handover.tick")
def tick(label: str) -> str:
    return label


class Erratic(BaseSchedule):  # type: ignore[misc]
    """Always due: a schedule class only Celery understands."""

    def is_due(self, last_run_at: Any) -> Any:
        return schedstate(True, 60.0)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Erratic)

    def __hash__(self) -> int:
        return hash(Erratic)

    def __reduce__(self) -> Any:
        return Erratic, ()
