"""Explicit outcomes a job body can return or raise, besides succeeding or failing.

Why it exists: "try again in ten minutes, this was not a failure", "stop, this job is no longer
wanted" and "drop it, retrying cannot help" are decisions only the body can make. Raising
``Snooze``, ``Cancel`` or ``Discard`` (or returning one) says so explicitly. They derive from
``BaseException`` so a body's own ``except Exception:`` cannot swallow them by accident.

What it is not: a failure. A snoozed attempt is not counted against ``max_attempts``.
"""

from __future__ import annotations

from datetime import timedelta

from ujobs_bridge._internal.jobs import validation


class Outcome(BaseException):
    """Base of the explicit outcomes."""


class Snooze(Outcome):
    """Run again after ``delay``; the attempt is not counted."""

    def __init__(self, delay: float | timedelta) -> None:
        self.delay_s = validation.seconds(
            "snooze delay", delay, allow_zero=True, maximum=validation.MAX_DELAY_S
        )
        super().__init__(f"snoozed for {self.delay_s}s")


class Cancel(Outcome):
    """Stop for good, as if an operator had cancelled the job."""

    def __init__(self, reason: str = "cancelled by the job") -> None:
        self.reason = reason
        super().__init__(reason)


class Discard(Outcome):
    """Dead-letter now without further attempts: retrying cannot help."""

    def __init__(self, reason: str = "discarded by the job") -> None:
        self.reason = reason
        super().__init__(reason)
