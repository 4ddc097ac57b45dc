"""The soak's ``@job`` bodies and its periodic task (``-A bench.soak.jobs`` for the workers and
the schedulers).

Why it exists: the workers and schedulers are real subprocesses, so what they run lives in an
importable module. Each body brackets its work with ``marks.execution`` (the record the
verdict counts) and fails as the producer planned (``mix``): ``plain`` raises ``Planned`` while
its attempt is at most ``fail`` (retried) or ``PlannedPoison`` when ``fail`` is ``POISON`` (not
in ``retry_on``: dead at once), returns a result over the workers' ``--max-result-bytes`` for
``OVERSIZE`` and raises an exception that cannot be shown on its first attempt for
``UNPRINTABLE``; ``hang`` (``HANG``, ``HANG_THREADS``) blocks in ``time.sleep`` past its
timeout, deaf to its signal, on its first attempts; ``stepped`` runs ``STEPS`` durable steps, each of which records
its own execution, and raises ``Planned`` after step ``fail_after`` on its first attempt, so
its retry replays the persisted steps (which must not run again); ``tick`` is what the
periodic task ``soak-tick`` fires every ``TICK_S`` seconds, catching up every missed
occurrence (``catch_up="all"``), so a miss is visible; ``probe`` is the slot probe
(``marks.probe``), sent to one worker's own queue at the end.

What it is not: realistic work. Bodies wait ``work_ms`` (cooperatively, so a stopped attempt
leaves at once) to keep some of them in flight when a fault lands.
"""

from __future__ import annotations

import time
from datetime import timedelta

from ujobs_bridge import current_job, job, step, task

from . import mix
from .marks import (
    Planned,
    PlannedHang,
    PlannedPoison,
    PlannedUnprintable,
    execution,
    record,
)
from .marks import (
    probe as probe_slots,
)
from .settings import MAX_RESULT_BYTES

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
    with execution("plain", ctx, key=key) as run:
        ctx.wait(work_ms / 1000)
        if fail == mix.POISON:
            raise PlannedPoison(f"poison {key}")
        if fail == mix.OVERSIZE:
            run.how = "oversize"
            return "x" * (MAX_RESULT_BYTES + 1024)
        if fail == mix.UNPRINTABLE and ctx.attempt == 1:
            raise PlannedUnprintable()
        if ctx.attempt <= fail:
            raise Planned(f"planned failure {ctx.attempt}/{fail} of {key}")
    return key


@job(
    queue=QUEUE,
    max_attempts=MAX_ATTEMPTS,
    backoff=BACKOFF_S,
    backoff_cap=BACKOFF_CAP_S,
    retry_on=(Planned,),
    timeout=mix.HANG_TIMEOUT_S,
)
def hang(key: str, fail: int, work_ms: int) -> str:
    ctx = current_job()
    hangs = ctx.attempt <= mix.HANG_ATTEMPTS
    with execution("plain", ctx, key=key, hang=hangs):
        if not hangs:
            ctx.wait(0.02)
            return key
        time.sleep(mix.HANG_S)  # deaf to the attempt's signal, as any blocking call is
        if ctx.cancelled:
            raise PlannedHang(f"{key} blocked past its timeout on attempt {ctx.attempt}")
    return key


@job(queue=QUEUE, max_attempts=1)
def probe(worker: str, expect: int) -> int:
    return probe_slots(worker, expect)


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
