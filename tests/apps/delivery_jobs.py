"""Jobs that report what their context says about the claim: ``SEEN`` keeps, per run,
``(attempt, redelivered)`` as the body read them."""

from __future__ import annotations

from ujobs_bridge import Snooze, current_job, job

SEEN: list[tuple[int, bool]] = []


@job(queue="deliveries")
def snooze_once() -> bool:
    """Snoozes on its first delivery, returns on the next one."""
    ctx = current_job()
    SEEN.append((ctx.attempt, ctx.redelivered))
    if not ctx.redelivered:
        raise Snooze(0)
    return True


@job(queue="deliveries")
def report() -> bool:
    ctx = current_job()
    SEEN.append((ctx.attempt, ctx.redelivered))
    return ctx.redelivered


@job(queue="deliveries", max_attempts=2)
def meets_outages() -> None:
    """Every run ends in a database outage (as a body that crashes the server would)."""
    from ujobs_bridge.errors import DatabaseUnavailableError

    ctx = current_job()
    SEEN.append((ctx.attempt, ctx.redelivered))
    raise DatabaseUnavailableError("the server went away (test)", hint="it comes back")
