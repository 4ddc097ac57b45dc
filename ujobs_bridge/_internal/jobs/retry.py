"""Retry policy: how many attempts, how long between them, and which errors deserve another go.

Why it exists: the decision "retry in N seconds, or dead-letter" is pure arithmetic on the attempt
number and the exception, so it lives apart from the worker and is tested without a database.
Backoff is exponential with a cap and "equal jitter" (half fixed, half random), so a burst of
failures does not come back as a burst of retries.

What it is not: a scheduler. The worker writes ``run_at = now + delay`` in the same statement that
releases the lease.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ujobs_bridge._internal.jobs.validation import MAX_DELAY_S, positive_int, seconds
from ujobs_bridge.errors import ConfigError, ErrorCode

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_BASE_S = 1.0
DEFAULT_BACKOFF_FACTOR = 2.0
DEFAULT_BACKOFF_CAP_S = 600.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base_s: float = DEFAULT_BACKOFF_BASE_S
    backoff_factor: float = DEFAULT_BACKOFF_FACTOR
    backoff_cap_s: float = DEFAULT_BACKOFF_CAP_S
    jitter: bool = True
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    random: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        positive_int("max_attempts", self.max_attempts, maximum=10_000)
        seconds("backoff_base_s", self.backoff_base_s, allow_zero=True, maximum=MAX_DELAY_S)
        seconds("backoff_cap_s", self.backoff_cap_s, allow_zero=True, maximum=MAX_DELAY_S)
        if not isinstance(self.jitter, bool):
            raise ConfigError(
                f"jitter must be True or False, got {self.jitter!r}",
                hint="pass jitter=True (spread retries) or jitter=False",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        factor = seconds("backoff_factor", self.backoff_factor)
        if factor < 1:
            raise ConfigError(
                f"backoff_factor is {factor}, which would shrink delays",
                hint="set backoff_factor >= 1",
            )
        if not self.retry_on or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in self.retry_on
        ):
            raise ConfigError(
                f"retry_on must be a non-empty tuple of exception classes, got {self.retry_on!r}",
                hint="e.g. retry_on=(ConnectionError, TimeoutError)",
                code=ErrorCode.JOB_OPTION_INVALID,
            )

    def delay_s(self, attempt: int) -> float:
        """Delay before attempt ``attempt + 1`` after attempt ``attempt`` failed."""
        try:
            raw = self.backoff_base_s * self.backoff_factor ** max(0, attempt - 1)
        except OverflowError:  # a large factor to a large power: past any cap
            raw = self.backoff_cap_s
        capped = min(self.backoff_cap_s, raw)
        if not self.jitter:
            return capped
        return capped / 2 + capped / 2 * self.random()

    def retries(self, exc: BaseException) -> bool:
        return isinstance(exc, self.retry_on)


def retry_classes(value: object) -> tuple[type[BaseException], ...]:
    """``retry_on`` as a tuple: one exception class, or an iterable of them (as ``except``
    takes); a ``ConfigError`` naming what was given otherwise."""
    if isinstance(value, type):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return tuple(value)
    raise ConfigError(
        f"retry_on must be an exception class or a tuple of them, got {value!r}",
        hint="e.g. retry_on=(ConnectionError, TimeoutError)",
        code=ErrorCode.JOB_OPTION_INVALID,
    )
