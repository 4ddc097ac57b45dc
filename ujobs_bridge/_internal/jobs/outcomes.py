"""Explicit outcomes a job body can return or raise, besides succeeding or failing.

Why it exists: "try again in ten minutes, this was not a failure", "stop, this job is no longer
wanted", "drop it, retrying cannot help" and "this failed for good, by my own rules" are
decisions only the body can make. Raising ``Snooze``, ``Cancel``, ``Discard`` or ``Fail`` (or
returning one) says so explicitly. They derive from
``BaseException`` so a body's own ``except Exception:`` cannot swallow them by accident.

What it is not: a failure. A snoozed attempt is not counted against ``max_attempts``.
"""

from __future__ import annotations

import re
from datetime import timedelta

from ujobs_bridge._internal.jobs import validation
from ujobs_bridge.errors import ConfigError, ErrorCode

FAILURE_KIND = re.compile(r"[A-Z][A-Z0-9_]{0,31}")


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


class Fail(Outcome):
    """End as failed for good, with the word the views show for it (``kind``) instead of a dead
    letter: the body's own package decided its retries (none are left), so the engine neither
    retries it nor counts it among the dead letters. ``error`` is the failure's text."""

    def __init__(self, error: str, kind: str) -> None:
        if not isinstance(kind, str) or not FAILURE_KIND.fullmatch(kind):
            raise ConfigError(
                f"failure kind {kind!r} is not allowed",
                hint="use a word in capitals, A-Z 0-9 _, at most 32 (for example 'FAILURE'):"
                " engine states are lower case, so the two never meet",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        self.error = error
        self.kind = kind
        super().__init__(error)
