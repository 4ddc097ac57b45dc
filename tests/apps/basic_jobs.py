"""Jobs the in-process worker tests run. Each records what it did in ``CALLS`` so tests can
assert how often a body really ran."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections import Counter
from typing import Any

from ujobs_bridge import current_job, job

CALLS: Counter[str] = Counter()
FAILURES_LEFT: dict[str, int] = {}
STARTED = threading.Event()


class Transient(Exception):
    pass


class Permanent(Exception):
    pass


@job(queue="basic")
def add(a: int, b: int) -> int:
    CALLS["add"] += 1
    return a + b


@job(queue="basic", max_attempts=4, backoff=10, jitter=False)
def flaky(key: str) -> str:
    CALLS[f"flaky:{key}"] += 1
    if FAILURES_LEFT.get(key, 0) > 0:
        FAILURES_LEFT[key] -= 1
        raise Transient(f"transient failure of {key}")
    return key


@job(queue="basic", max_attempts=2, backoff=0, jitter=False)
def always_fails() -> None:
    CALLS["always_fails"] += 1
    logging.getLogger("apps.basic_jobs").warning("always_fails: about to fail")
    print("always_fails: printed")  # a body's own output (JSON lines: a log record too)
    print("always_fails: printed on stderr", file=sys.stderr)
    raise Transient("this job never works")


@job(queue="basic", max_attempts=5, retry_on=(Transient,))
def picky(kind: str) -> None:
    CALLS[f"picky:{kind}"] += 1
    raise Transient("retry me") if kind == "transient" else Permanent("do not retry me")


@job(queue="basic")
def waits_for_cancel() -> str:
    ctx = current_job()
    CALLS["waits_for_cancel"] += 1
    STARTED.set()
    for _ in range(600):
        ctx.wait(0.05)  # raises AttemptAborted once cancelled
    return "never cancelled"


@job(queue="basic", timeout=0.3, max_attempts=2, backoff=0, jitter=False)
def too_slow() -> None:
    CALLS["too_slow"] += 1
    current_job().wait(30)


@job(queue="basic")
async def async_double(x: int) -> int:
    CALLS["async_double"] += 1
    await asyncio.sleep(0)
    return 2 * x


@job(queue="basic")
def returns_object() -> Any:
    return object()


@job(queue="other")
def other_queue() -> str:
    CALLS["other_queue"] += 1
    return "other"


@job(queue="basic")
def whereami() -> dict[str, object]:
    """What ``current_job()`` tells a body (in a thread, or a ``--pool processes`` child)."""
    import os

    ctx = current_job()
    return {"pid": os.getpid(), "queue": ctx.queue, "attempt": ctx.attempt, "id": str(ctx.id)}
