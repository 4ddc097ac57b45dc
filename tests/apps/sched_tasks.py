"""Periodic tasks for the scheduler tests: in-process ones import the jobs, subprocess ones run
``ujobs-bridge scheduler -A apps.sched_tasks``.

``race_all`` fires every second with ``catch_up="all"`` through an ``enqueue=`` function that
sets NO idempotency key, so the only thing between two racing leaders and a duplicate job is the
scheduler's (task, occurrence) fire ledger. ``race_skip`` is a seconds-cron with the ``job=``
shorthand (keyed). Nothing runs the jobs: they stay ``ready`` for the tests to count.
"""

from __future__ import annotations

from ujobs_bridge import job
from ujobs_bridge._internal.scheduling.task import Occurrence, task
from ujobs_bridge.job import EnqueueRequest

QUEUE = "sched-tests"


@job(queue=QUEUE)
def report(occurrence: str, catch_up: bool) -> None:
    """What a task fires; the body never runs in these tests."""


def _unkeyed(occurrence: Occurrence) -> list[EnqueueRequest]:
    return [report.call(occurrence=occurrence.at.isoformat(), catch_up=occurrence.catch_up)]


race_all = task("race-all", every=1, catch_up="all", max_catch_up=500, enqueue=_unkeyed)
race_skip = task("race-skip", cron="* * * * * *", catch_up="skip", job=report)
