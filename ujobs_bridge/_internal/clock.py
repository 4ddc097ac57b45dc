"""The one place that reads the wall clock.

Why it exists: job logic reads an injected ``Clock`` once per pass, so tests can freeze time
instead of sleeping. ``SystemClock.sql_now()`` answers ``None``, which every time-sensitive
statement turns into the database's ``now()``: in production the database is the one time
authority for eligibility and leases; a ``FrozenClock`` pins both Python and SQL to one instant.

What it is not: a lease clock. Leases are always set and compared with the database's ``now()``,
and local deadlines use ``time.monotonic()``.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    def sql_now(self) -> datetime | None:
        """The instant to hand to SQL as ``%(now)s``; ``None`` means the database's ``now()``."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sql_now(self) -> datetime | None:
        return None


class FrozenClock:
    """A clock that only moves when told to. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError("FrozenClock needs a timezone-aware datetime (use tzinfo=UTC)")
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def sql_now(self) -> datetime | None:
        return self.now()

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._now = instant


SYSTEM_CLOCK = SystemClock()
