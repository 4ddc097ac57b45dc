"""Jobs with durable steps for the in-process step tests. ``CALLS`` counts real executions of
each step function, so a test can tell a replayed step from a re-run one."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ujobs_bridge import Cancel, Discard, EventTimeoutError, Snooze, current_job, job, step

CALLS: Counter[str] = Counter()
FAIL_AFTER_FIRST_STEP: set[str] = set()


def effect(name: str, value: Any = None) -> Any:
    CALLS[name] += 1
    return value if value is not None else f"{name}-result-{CALLS[name]}"


@job(queue="steps", max_attempts=3, backoff=0, jitter=False)
def two_steps(key: str) -> list[Any]:
    first = step.run("first", effect, f"{key}:first")
    if key in FAIL_AFTER_FIRST_STEP:
        FAIL_AFTER_FIRST_STEP.discard(key)
        raise RuntimeError("crash between the steps")
    second = step.run("second", effect, f"{key}:second")
    return [first, second]


@job(queue="steps")
def same_name_twice() -> None:
    step.run("charge", effect, "charge")
    step.run("charge", effect, "charge")


@job(queue="steps", max_attempts=3, backoff=0, jitter=False)
def drifting_names() -> None:
    n = CALLS["drift-attempts"] = CALLS["drift-attempts"] + 1
    step.run(f"fetch-{n}", effect, f"fetch-{n}")
    raise RuntimeError("fail so the next attempt replays")


@job(queue="steps")
def step_returns_object() -> None:
    step.run("bad", object)


@job(queue="steps")
def sleeper(key: str, seconds: float) -> str:
    step.run("before", effect, f"{key}:before")
    step.sleep("nap", seconds)
    step.run("after", effect, f"{key}:after")
    return "rested"


@job(queue="steps")
def waiter(key: str, timeout: float | None = None) -> Any:
    step.run("before", effect, f"{key}:before")
    try:
        got = step.wait_for_event("approval", "order.approved", key=key, timeout=timeout)
    except EventTimeoutError:
        return "timed out"
    step.run("after", effect, f"{key}:after")
    return got


@job(queue="steps")
async def async_steps(x: int) -> int:
    a = await step.run_async("double", lambda: effect("async-double", 2 * x))
    await step.sleep_async("nap", 0)
    return int(a) + 1


@job(queue="steps", max_attempts=2)
def outcome(kind: str) -> Any:
    CALLS[f"outcome:{kind}"] += 1
    if kind == "snooze":
        if CALLS["outcome:snooze"] == 1:
            raise Snooze(30)
        return "woke"
    if kind == "cancel":
        return Cancel("no longer wanted")
    if kind == "discard":
        raise Discard("bad input, retrying cannot help")
    return None


@job(queue="steps")
def steps_after_cancel() -> None:
    current_job().signal.abort(
        current_job().signal.code or __import__("ujobs_bridge").ErrorCode.JOB_CANCELLED, "test"
    )
    step.run("late", effect, "late")
