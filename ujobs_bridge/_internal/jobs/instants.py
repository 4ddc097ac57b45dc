"""The one range of instants a row may hold: what Python's ``datetime`` and Postgres both read.

Why it exists: Postgres keeps timestamps from 4713 BC to year 294276 and ``±infinity``; a Python
``datetime`` holds years 1 to 9999. An instant outside Python's years, once in a row, cannot be
read by the claim that picks the row, nor by the dashboard, ``/metrics`` or the CLI. An instant
near either end can also leave that range when shown in another time zone (Postgres offsets reach
±15:59), so the range keeps a day of margin on each side, in UTC. Every instant that enters a
row is checked against it: the engine's ``run_at``/``expires`` (and a step's ``sleep_until``),
Celery's ``eta``/``countdown``/``expires`` at the sender, what ``migrate`` reads from a broker.
The sender's and the drainer's checks use these names through ``ujobs_bridge.ext.jobs``.

What it is not: the reading side. A row written by other means with an instant outside the range
(``-infinity`` by hand, an old release) is still shown: ``db/far_instants.py``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from ujobs_bridge.errors import ConfigError, ErrorCode

EARLIEST_INSTANT = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
LATEST_INSTANT = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)
RANGE_TEXT = f"{EARLIEST_INSTANT.date().isoformat()} .. {LATEST_INSTANT.date().isoformat()} UTC"
RANGE_HINT = f"give an aware datetime within years 1..9999 once in UTC ({RANGE_TEXT}), or a delay"


def storable_instant(value: datetime, what: str) -> datetime:
    """``value`` in UTC when a row can hold it; ``ValueError`` naming ``what`` otherwise (a
    year-10000 or BC instant once in UTC). A naive ``value`` is taken as UTC."""
    try:
        utc = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST_INSTANT <= utc <= LATEST_INSTANT:
        raise ValueError(
            f"{what} {value.isoformat()} is outside the instants a row can hold ({RANGE_TEXT})"
        )
    return utc


def instant_after(now: datetime, seconds: float, what: str) -> datetime:
    """``now`` plus ``seconds`` when a row can hold it; ``ValueError`` naming ``what`` otherwise
    (a countdown past year 9999, a non-finite number)."""
    if not math.isfinite(seconds):
        raise ValueError(f"{what} {seconds} seconds is not a finite duration")
    try:
        later = now + timedelta(seconds=seconds)
    except OverflowError:
        later = None
    if later is None:
        raise ValueError(
            f"{what} {seconds:g} seconds from now is outside the instants a row can hold "
            f"({RANGE_TEXT})"
        )
    return storable_instant(later, f"{what} {seconds:g} seconds from now,")


def instant_option(what: str, value: datetime) -> datetime:
    """An API's aware instant option, in UTC; ``ConfigError`` (``UJ_JOB_OPTION_INVALID``, with
    the range as hint) when a row cannot hold it."""
    try:
        return storable_instant(value, what)
    except ValueError as exc:
        raise ConfigError(str(exc), hint=RANGE_HINT, code=ErrorCode.JOB_OPTION_INVALID) from None
