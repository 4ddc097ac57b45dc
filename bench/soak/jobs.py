"""The soak's ``@job`` bodies and its periodic task (``-A bench.soak.jobs`` for the workers and
the schedulers).

Why it exists: the workers and schedulers are real subprocesses, so what they run lives in an
importable module. Each body brackets its work with ``marks.execution`` (the record the
verdict counts) and fails as the producer planned: ``plain`` raises ``Planned`` while its
attempt is at most ``fail`` (retried) or ``PlannedPoison`` when ``fail`` is -1 (not in
``retry_on``: dead at once); ``stepped`` runs ``STEPS`` durable steps, each of which records
its own execution, and raises ``Planned`` after step ``fail_after`` on its first attempt, so
its retry replays the persisted steps (which must not run again); ``tick`` is what the
periodic task ``soak-tick`` fires every ``TICK_S`` seconds, catching up every missed
occurrence (``catch_up="all"``), so a miss is visible.

What it is not: realistic work. Bodies wait ``work_ms`` (cooperatively, so a stopped attempt
leaves at once) to keep some of them in flight when a fault lands.
"""

from __future__ import annotations

import time
from datetime import timedelta

from ujobs_bridge import current_job, job, step, task

from .marks import Planned, PlannedPoison, execution, record

QUEUE = "soak_jobs"
STEPS = 3
TICK_S = 2
# High on purpose: a job whose workers were SIGKILLed several times in a row (each claim is
# counted, its prefetch too) must not dead-letter for our faults; a dead job here is a finding.
MAX_ATTEMPTS = 25
BACKOFF_S = 0.2
BACKOFF_CAP_S = 1.0


@job(
    queue=QUEUE,
    max_attempts=MAX_ATTEMPTS,
    backoff=BACKOFF_S,
    backoff_cap=BACKOFF_CAP_S,
    retry_on=(Planned,),
)
def plain(key: str, fail: int, work_ms: int) -> str:
    ctx = current_job()
    with execution("plain", ctx, key=key):
        ctx.wait(work_ms / 1000)
        if fail < 0:
            raise PlannedPoison(f"poison {key}")
        if ctx.attempt <= fail:
            raise Planned(f"planned failure {ctx.attempt}/{fail} of {key}")
    return key


def _step(job_id: str, name: str, work_ms: int, value: int) -> int:
    record("step", job=job_id, step=name)
    time.sleep(work_ms / 1000)
    return value


@job(
    queue=QUEUE,
    max_attempts=MAX_ATTEMPTS,
    backoff=BACKOFF_S,
    backoff_cap=BACKOFF_CAP_S,
    retry_on=(Planned,),
)
def stepped(key: str, fail_after: int, work_ms: int) -> int:
    ctx = current_job()
    job_id = str(ctx.id)
    total = 0
    with execution("steps", ctx, key=key):
        for i in range(STEPS):
            total += step.run(f"s{i}", _step, job_id, f"s{i}", work_ms, i + 1)
            if i == fail_after and ctx.attempt == 1:
                raise Planned(f"planned failure after step s{i} of {key}")
    return total


@job(
    queue=QUEUE,
    max_attempts=MAX_ATTEMPTS,
    backoff=BACKOFF_S,
    backoff_cap=BACKOFF_CAP_S,
    retry_on=(Planned,),
)
def tick(occurrence: str, catch_up: bool) -> str:
    ctx = current_job()
    with execution("scheduler", ctx, occurrence=occurrence):
        ctx.wait(0.02)
    return occurrence


soak_tick = task(
    "soak-tick", every=timedelta(seconds=TICK_S), catch_up="all", max_catch_up=1000, job=tick
)
