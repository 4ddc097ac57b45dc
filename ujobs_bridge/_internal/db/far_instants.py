"""Read a timestamp Python cannot hold as the nearest one it can, which still says what it was.

Why it exists: Postgres keeps instants a ``datetime`` cannot (``±infinity``, BC dates, years past
9999), and psycopg refuses to load them (``DataError``), which fails the whole statement's
result: a claim whose batch holds one such row commits the claim and loses every row of it, and
the dashboard, ``/metrics`` and the CLI (even ``jobs cancel``) crash on the row. New rows cannot
get such an instant (``jobs/instants.py`` checks every one that enters), but a row written by
hand or by an older release can. Every connection the engine opens (``connections.py``: one
policy) loads ``timestamptz`` and ``timestamp`` through loaders that give such a value as a
``FarInstant``: a ``datetime`` at the nearest end of Python's range (``datetime.min`` or ``max``,
so comparisons, sorting and ages work), whose ``isoformat()`` and ``str()`` are the server's own
text (``-infinity``, ``10000-01-01 11:59:00+00``), so pages, tables and ``--json`` show the
stored value. Every other value is loaded by psycopg's own loader, unchanged.

What it is not: the range check at entry (``jobs/instants.py``), nor a way to write such values.
"""

from __future__ import annotations

import re
import struct
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.adapt import Buffer, Loader
from psycopg.pq import Format

# The OIDs of the timestamp types, whose loaders refuse what Python cannot hold.
TIMESTAMPTZ_OID, TIMESTAMP_OID = 1184, 1114
_INT64 = struct.Struct("!q")
_INT64_MAX, _INT64_MIN = 2**63 - 1, -(2**63)  # binary infinity and -infinity


class FarInstant(datetime):
    """A stored instant outside Python's years, as ``datetime.min`` (earlier than year 1, or
    ``-infinity``) or ``datetime.max`` (later than 9999, or ``infinity``), in UTC; ``text`` is the
    value as the server wrote it, which ``isoformat()`` and ``str()`` return. ``replace`` and
    ``astimezone`` answer a plain ``datetime``; pickling keeps the class (a pool child gets it)."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str, late: bool, aware: bool = True) -> FarInstant:
        end = datetime.max if late else datetime.min
        made = super().__new__(
            cls,
            end.year,
            end.month,
            end.day,
            end.hour,
            end.minute,
            end.second,
            end.microsecond,
            tzinfo=UTC if aware else None,
        )
        made.text = text
        return made

    @property
    def late(self) -> bool:
        return self.year == datetime.max.year

    def plain(self) -> datetime:
        """The same instant as a plain ``datetime`` (the end of Python's range)."""
        end = datetime.max if self.late else datetime.min
        return end.replace(tzinfo=self.tzinfo)

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"FarInstant({self.text!r})"

    def replace(self, *args: Any, **kwargs: Any) -> datetime:  # type: ignore[override]
        return self.plain().replace(*args, **kwargs)

    def astimezone(self, tz: Any = None) -> datetime:  # type: ignore[override]
        return self.plain().astimezone(tz)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (FarInstant, (self.text, self.late, self.tzinfo is not None))


# What psycopg's text loaders refuse because Python cannot hold it (ISO DateStyle, the server's
# default): infinity, -infinity, a BC date, a year of five digits or more. Anything else they
# refuse (another DateStyle) is not ours to hide.
_FAR_TEXT = re.compile(rb"^(-?)infinity$|^\d{4,}-.* BC$|^\d{5,}-")


def _late(data: Buffer) -> bool | None:
    """Whether a refused text value lies after Python's range (True), before it (False), or is
    not a far instant at all (None)."""
    text = bytes(data)
    found = _FAR_TEXT.match(text)
    if found is None:
        return None
    return not (found.group(1) or text.endswith(b" BC"))


class _Tolerant(Loader):
    """psycopg's own loader for the type (the C one where installed), and a ``FarInstant`` for a
    value it refuses."""

    base: type[Loader]  # psycopg's loader of this type and format
    aware: bool  # timestamptz (in UTC) or timestamp (naive)

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self._inner = self.base(oid, context)

    def load(self, data: Buffer) -> Any:
        try:
            return self._inner.load(data)
        except psycopg.DataError:
            far = self.far(data)
            if far is None:
                raise
            return far

    def far(self, data: Buffer) -> FarInstant | None:
        late = _late(data)
        if late is None:
            return None
        return FarInstant(bytes(data).decode("ascii", "replace"), late, self.aware)


class _TolerantBinary(_Tolerant):
    format = Format.BINARY

    def far(self, data: Buffer) -> FarInstant | None:
        (count,) = _INT64.unpack(bytes(data))  # microseconds from 2000-01-01
        if count in (_INT64_MAX, _INT64_MIN):
            text = "infinity" if count > 0 else "-infinity"
        else:
            text = "after 9999-12-31" if count > 0 else "before 0001-01-01"
        return FarInstant(text, count > 0, self.aware)


def _tolerant(oid: int, fmt: Format) -> type[Loader]:
    base = psycopg.adapters.get_loader(oid, fmt)
    assert base is not None  # psycopg loads both types in both formats
    parent = _TolerantBinary if fmt is Format.BINARY else _Tolerant
    attributes = {"base": base, "aware": oid == TIMESTAMPTZ_OID}
    return type(f"Tolerant{base.__name__}", (parent,), attributes)


# Built once, from psycopg's default loaders.
_LOADERS = [
    (oid, _tolerant(oid, fmt))
    for oid in (TIMESTAMPTZ_OID, TIMESTAMP_OID)
    for fmt in (Format.TEXT, Format.BINARY)
]


def tolerate_far_instants(conn: psycopg.Connection[Any]) -> None:
    """Load this connection's date/time values through the tolerant loaders (the connection
    policy calls it on every connection it opens)."""
    for oid, loader in _LOADERS:
        conn.adapters.register_loader(oid, loader)


__all__ = ["FarInstant", "tolerate_far_instants"]
