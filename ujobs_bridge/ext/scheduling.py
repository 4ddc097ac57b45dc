"""Scheduling as a beat replacement builds on it: cron and interval schedules, catch-up policies,
periodic tasks and their occurrences, and the leader-elected ``Scheduler``.

What it is not: the user's ``task()`` (re-exported at the root).
"""

from __future__ import annotations

from ujobs_bridge._internal.scheduling.cron import (
    CATCH_UP_POLICIES,
    DEFAULT_ANCHOR,
    CatchUpPolicy,
    CronSchedule,
    IntervalSchedule,
    missed,
)
from ujobs_bridge._internal.scheduling.scheduler import DEFAULT_INTERVAL_S, Scheduler, TaskSource
from ujobs_bridge._internal.scheduling.task import (
    DEFAULT_MAX_CATCH_UP,
    Occurrence,
    PeriodicTask,
    Plan,
    tasks_from_module,
)

__all__ = [
    "CATCH_UP_POLICIES",
    "DEFAULT_ANCHOR",
    "DEFAULT_INTERVAL_S",
    "DEFAULT_MAX_CATCH_UP",
    "CatchUpPolicy",
    "CronSchedule",
    "IntervalSchedule",
    "Occurrence",
    "PeriodicTask",
    "Plan",
    "Scheduler",
    "TaskSource",
    "missed",
    "tasks_from_module",
]
