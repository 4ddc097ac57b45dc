"""A batch's columns as PostgreSQL binary arrays, built without a Python call per element.

Why it exists: ``enqueue_many`` sends a batch as one array per column (one statement, one round
trip). psycopg's generic list dumper looks up, calls and length-prefixes every element in
Python: for a batch of 20,000 jobs and a dozen columns that was most of the client's cost of
the whole insert. Most columns of a batch are one value repeated (the job's name, queue,
retry policy, priority, often its input), and a repeated element is one ``bytes``
multiplication; the other text and uuid columns are one ``b"".join``.

The result is the exact wire format of ``array_recv`` (one dimension, lower bound 1, the
element type's oid, each element as its length and its binary value, -1 for NULL), sent with
oid 0: the statement's cast (``%(names)b::text[]``) names the type, and the server checks the
element oid inside against it.

What it is not: a general adapter. It packs only the element types it names; anything else
(timestamps, a column of mixed ints) stays a list for psycopg.
"""

from __future__ import annotations

import contextlib
from struct import Struct
from struct import error as StructError
from typing import Any
from uuid import UUID

import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import Dumper
from psycopg.pq import Format

_HEADER = Struct(">iiiii").pack  # ndim, has-nulls flag, element oid, length, lower bound
_LENGTH = Struct(">i").pack
_NULL = _LENGTH(-1)
_UUID_LENGTH = _LENGTH(16)
# element oid, and how one element is written in binary
TEXT = (25, str.encode)
INT4 = (23, Struct(">i").pack)
INT2 = (21, Struct(">h").pack)
FLOAT8 = (701, Struct(">d").pack)
ELEMENTS = {"text": TEXT, "int4": INT4, "int2": INT2, "float8": FLOAT8}
_TYPE_OF = {"text": str, "int4": int, "int2": int, "float8": float}


class Packed:
    """One binary array, ready to send."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class PackedDumper(Dumper):
    format = Format.BINARY
    oid = 0  # the statement's cast gives the type

    def dump(self, obj: Any) -> Buffer:
        data: bytes = obj.data
        return data


def register(conn: psycopg.Connection[Any]) -> None:
    """Let ``conn`` send ``Packed`` parameters (idempotent; only this connection)."""
    conn.adapters.register_dumper(Packed, PackedDumper)


def repeated(kind: tuple[int, Any], value: Any, n: int) -> Packed:
    """``n`` copies of ``value``, one non-null element of ``kind``."""
    oid, encode = kind
    item: bytes = encode(value)
    return Packed(_HEADER(1, 0, oid, n, 1) + (_LENGTH(len(item)) + item) * n)


def texts(values: list[str | None]) -> Packed:
    """A text array (elements may be None)."""
    length, encode = _LENGTH, str.encode
    parts: list[bytes] = []
    for value in values:
        if value is None:
            parts.append(_NULL)
        else:
            item = encode(value)
            parts.append(length(len(item)) + item)
    nulls = 1 if values.count(None) else 0
    return Packed(_HEADER(1, nulls, TEXT[0], len(values), 1) + b"".join(parts))


def uuids(values: list[UUID]) -> Packed:
    """A uuid array without nulls."""
    prefix = _UUID_LENGTH
    return Packed(
        _HEADER(1, 0, 2950, len(values), 1) + b"".join([prefix + v.bytes for v in values])
    )


def column(kind: str, values: tuple[Any, ...]) -> Packed | list[Any] | None:
    """One column of a batch as it is best sent: NULL when no row sets it, one repeated element
    when every row has the same one (of a packable ``kind``), a packed text or uuid array, else
    a list (psycopg's own dumper)."""
    n = len(values)
    first = values[0]
    if first is None and values.count(None) == n:
        return None
    element = ELEMENTS.get(kind)
    if element is not None and type(first) is _TYPE_OF[kind] and values.count(first) == n:
        with contextlib.suppress(StructError):  # out of range: psycopg sends it, the cast refuses
            return repeated(element, first, n)
    if kind == "text" and all(type(v) is str or v is None for v in values):
        return texts(list(values))
    if kind == "uuid" and all(type(v) is UUID for v in values):
        return uuids(list(values))
    return list(values)
