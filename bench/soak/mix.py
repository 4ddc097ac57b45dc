"""The workloads' mix: what each item a producer sends is planned to do.

Why it exists: the producers choose, the bodies obey and the verdict judges, so the three must
read one plan. An item's plan is one integer (``producers.Sent.plan``): for ``plain``,
``celery`` and ``migrated`` how many times it fails before it succeeds (0 to 2) or ``POISON``
(dead on purpose); for ``steps`` after which step its first attempt fails (-1: never). Besides
that draw, one item in ``SPECIAL_EVERY`` of a workload that has special kinds is the next of
them in turn, so even the smallest run sends each at least once:

- ``OVERSIZE``: the body returns a result over the workers' ``--max-result-bytes``; its job
  fails ``UJ_OUTPUT_TOO_LARGE``, dead on purpose (like ``POISON``), and no other job may pay.
- ``HANG``: the body blocks in ``time.sleep`` past its ``timeout`` on its first ``HANG_ATTEMPTS``
  attempts, deaf to its signal (a thread pool abandons the thread, a process pool kills the
  child), then succeeds: hung bodies with retries. ``HANG_THREADS`` is the same on the queue
  only the thread-pool worker of the jobs consumes, so that every run abandons threads.
- ``UNPRINTABLE``: the first attempt raises an exception whose ``__str__`` and ``__repr__``
  raise; the job retries and succeeds.
- ``EDGES``: ``run_at`` (Celery: ``eta``) at the earliest instant a row can hold and
  ``expires`` at the latest; runs at once.
- ``MINUS_INFINITY`` / ``BC``: ``run_at`` set by hand (in the enqueue's transaction) to
  ``-infinity`` / 1 BC, which no sender accepts any more: the claim must take the row alone,
  without failing its batch-mates; it runs.
- ``YEAR_10000``: ``run_at`` set by hand to year 10000: never due. At the end the soak reads it
  and cancels it through the engine's introspector (``jobs show``/``jobs cancel``); cancelled is
  its planned end.

What it is not: the producers' threads (``producers``) or the bodies (``jobs``,
``celery_tasks``).
"""

from __future__ import annotations

import random

POISON = -1
OVERSIZE = -2
HANG = -3
HANG_THREADS = -9
UNPRINTABLE = -4
EDGES = -5
MINUS_INFINITY = -6
BC = -7
YEAR_10000 = -8

SPECIAL_EVERY = 16
SPECIALS: dict[str, tuple[int, ...]] = {
    "plain": (HANG_THREADS, OVERSIZE, UNPRINTABLE, EDGES, MINUS_INFINITY, HANG, BC, YEAR_10000),
    "celery": (EDGES,),
    "migrated": (EDGES,),
}
# run_at written by hand, as stored text
BY_HAND = {
    MINUS_INFINITY: "-infinity",
    BC: "0001-12-31 10:00:00+00 BC",
    YEAR_10000: "10000-01-01 11:59:00+00",
}
NAMES = {
    POISON: "poison",
    OVERSIZE: "oversize result",
    HANG: "hung body",
    HANG_THREADS: "hung thread body",
    UNPRINTABLE: "unprintable exception",
    EDGES: "edge instants",
    MINUS_INFINITY: "run_at -infinity",
    BC: "run_at 1 BC",
    YEAR_10000: "run_at year 10000",
}

HANG_ATTEMPTS = 2  # a HANG body blocks on its first two attempts, then succeeds
HANG_TIMEOUT_S = 1.5  # the hang job's timeout
HANG_S = 4.0  # how long a hanging body blocks


def special(workload: str, i: int) -> int | None:
    """The special kind item ``i`` of ``workload`` is, or None (a drawn plan)."""
    kinds = SPECIALS.get(workload)
    if not kinds or i % SPECIAL_EVERY != SPECIAL_EVERY // 2:
        return None
    return kinds[(i // SPECIAL_EVERY) % len(kinds)]


def fail_plan(rng: random.Random) -> int:
    return rng.choices([0, 1, 2, POISON], weights=[70, 18, 9, 3])[0]


def step_plan(rng: random.Random) -> int:
    return rng.choices([-1, 0, 1, 2], weights=[55, 15, 15, 15])[0]


def planned_dead(plan: int) -> bool:
    """The item ends dead (or cancelled) on purpose."""
    return plan in (POISON, OVERSIZE, YEAR_10000)
