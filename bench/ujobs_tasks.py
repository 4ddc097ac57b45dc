"""The jobs the bench's ujobs-bridge workers load (``ujobs-bridge worker -A bench.ujobs_tasks``).

Why it exists: the worker finds jobs by importing the module named with ``-A``, so the bench's
jobs live in a module of their own. ``noop`` does nothing (drains count ``state = 'done'`` rows
in Postgres); ``ping`` takes ``time.time()`` on its first line and RPUSHes ``"<sent> <now>"`` to
the Redis list named by ``BENCH_LATENCY_KEY``, exactly as the Celery ``ping`` task does.
``five_steps`` runs 5 durable ``step.run`` calls of a no-op, so that its drain rate beside
``noop``'s is the cost of steps themselves (one persisted result per step; a first claim
reads no stored steps back).

``redis`` is imported by ``ping`` alone, so a worker that never runs it does not pay for it.

What it is not: an example of good job design; bodies are empty on purpose.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ujobs_bridge import job, step

if TYPE_CHECKING:
    import redis

QUEUE = "bench"
STEPS = 5  # bench.cells.STEP_COUNT: not imported, so the worker loads nothing but this module
_redis: redis.Redis | None = None


def _client() -> redis.Redis:
    # Imported here, not at the top: only ``ping`` needs it, and the many-workers cell starts
    # 32 workers that load this module, each paying for the import (a sixth of its start-up).
    import redis

    global _redis
    if _redis is None:
        url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
        _redis = redis.Redis.from_url(url, socket_timeout=10)
    return _redis


@job(queue=QUEUE)
def noop() -> None:
    return None


@job(queue=QUEUE)
def ping(sent: float) -> None:
    now = time.time()
    _client().rpush(os.environ["BENCH_LATENCY_KEY"], f"{sent!r} {now!r}")


def _nothing() -> None:
    return None


@job(queue=QUEUE)
def five_steps() -> None:
    for i in range(STEPS):
        step.run(f"s{i}", _nothing)
