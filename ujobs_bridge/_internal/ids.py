"""Job ids: UUIDv7 (RFC 9562), time-ordered so the primary key grows at its right edge.

Why it exists: a random UUIDv4 primary key puts every new row, and every new row version a state
change writes, into a random index page, and after each checkpoint the first write to a page logs
the whole page, so a claim of many v4 ids logs nearly one full page per job.
Time-ordered ids keep a batch's index entries on a few adjacent pages. They are still UUIDs, so
anything that stores or prints a job id (Celery task ids included) keeps working.

What it is not: a clock. The embedded millisecond is the producer's and orders nothing.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable


def new_job_id() -> uuid.UUID:
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 random bits; 74 are used
    rand_a = rand >> 68  # 12 bits
    rand_b = rand & ((1 << 62) - 1)  # 62 bits
    value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return uuid.UUID(int=value)


def new_job_ids(n: int) -> list[uuid.UUID]:
    """``n`` ids laid out as ``new_job_id`` lays one out, from one clock reading and one read of
    the OS's randomness (a batch of rows: one syscall instead of ``n``)."""
    millis = time.time_ns() // 1_000_000
    head = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | 0b10 << 62
    rand = os.urandom(10 * n)
    low = (1 << 62) - 1
    from_bytes = int.from_bytes
    make = _from_int
    return [
        make(head | (value >> 68) << 64 | (value & low))
        for value in (from_bytes(rand[start : start + 10], "big") for start in range(0, 10 * n, 10))
    ]


def _checked_from_int(value: int) -> uuid.UUID:
    return uuid.UUID(int=value)


def _unchecked_from_int(value: int) -> uuid.UUID:
    """``uuid.UUID(int=value)`` for a value known to fit in 128 bits, without the constructor's
    argument parsing (most of its cost; a batch builds thousands): what ``UUID.__init__`` ends
    with, the two slots set directly."""
    made = _new(uuid.UUID)
    _set(made, "int", value)
    _set(made, "is_safe", _UNKNOWN)
    return made


_new = object.__new__
_set = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown


def _pick() -> Callable[[int], uuid.UUID]:
    """The unchecked constructor if it builds exactly what ``uuid.UUID(int=)`` does on this
    Python (same slots), else the plain one."""
    probe = (1 << 127) | 12345
    try:
        made = _unchecked_from_int(probe)
        same = made == uuid.UUID(int=probe) and hash(made) == hash(uuid.UUID(int=probe))
        same = (
            same
            and str(made) == str(uuid.UUID(int=probe))
            and made.bytes == uuid.UUID(int=probe).bytes
        )
    except (AttributeError, TypeError):
        return _checked_from_int
    return _unchecked_from_int if same else _checked_from_int


_from_int = _pick()
