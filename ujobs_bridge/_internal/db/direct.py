"""A hot one-row statement run through libpq directly: prepared once per connection, its values
sent as text, its first value read back.

Why it exists: a one-by-one ``.delay()`` is one autocommit statement and one durable commit, about
one round trip, and psycopg's cursor (its generators, query conversion, adaptation and row
making) is a measurable share of its client CPU (``python -m bench --cells delay-one``).
Here the statement is prepared on a connection the first time it runs there and then sent with
``send_query_prepared``; the wait for its result polls the socket, so a signal (Ctrl-C) still
interrupts it as it interrupts psycopg's own wait.

What psycopg guarantees and this keeps:
- **Where it runs**: only on an autocommit connection at rest that the caller holds alone (a
  pooled connection it borrowed), and never where server-side prepared statements are off
  (``prepare_threshold`` None: PgBouncer in transaction mode); ``usable`` says so, and the caller
  runs its cursor otherwise.
- **Values**: None, str, int, float, UUID and datetime, written as psycopg's text dumpers write them, in
  the connection's client encoding (``PGCLIENTENCODING`` or ``options`` may make it other than
  UTF-8), and text read back in it too; a NUL character is refused with psycopg's ``DataError``
  (libpq would cut the string there); anything else is a ``TypeError`` (the caller's mistake,
  not data). The statement's own text must be ASCII, the same bytes in any client encoding.
- **Errors are psycopg's**: a statement's error raises the class psycopg raises for its SQLSTATE,
  with its diagnostics; a lost connection raises ``OperationalError`` (``connections.transient``
  reads both as it reads psycopg's). A prepared statement the server no longer has (``DISCARD
  ALL``, SQLSTATE 26000) is prepared again and the statement runs once more.
- **An interrupted wait** (Ctrl-C, any exception while the statement is in flight) closes the
  connection: its result may still arrive, and no later statement may read it as its own. The
  pool replaces a closed connection.

What it is not: a query API. Statements in a transaction, with more than one row back, or with
values psycopg's adaptation must decide (json, arrays, binary) go through psycopg's cursor.
"""

from __future__ import annotations

import re
import select
import threading
import weakref
from collections.abc import Mapping
from datetime import datetime
from typing import Any, LiteralString
from uuid import UUID

import psycopg
from psycopg import pq

Conn = psycopg.Connection[Any]

# psycopg's named placeholder; the statements here have no other `%` (checked at construction).
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_UNDEFINED_PREPARED_STATEMENT = b"26000"
_DUPLICATE_PREPARED_STATEMENT = b"42P05"
_NUL_REFUSED = "PostgreSQL text fields cannot contain NUL (0x00) bytes"


class DirectStatement:
    """One statement of a package's ``db/sql`` (named ``%(name)s`` placeholders), run directly.

    ``first_value(conn, params)`` runs it and returns the first column of its first row, or None
    when it returns no row; ``first_row`` the first ``width`` columns of that row."""

    def __init__(self, name: str, query: LiteralString) -> None:
        self.name = name.encode()
        self.params: list[str] = []

        def numbered(match: re.Match[str]) -> str:
            if match.group(1) not in self.params:
                self.params.append(match.group(1))
            return f"${self.params.index(match.group(1)) + 1}"

        text = _PLACEHOLDER.sub(numbered, query)
        if "%" in text:
            raise ValueError(f"statement {name!r} holds a '%' that is not a named placeholder")
        self.query = text.encode("ascii")  # UnicodeEncodeError: a non-ASCII statement
        self._prepared: weakref.WeakKeyDictionary[Conn, bool] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    @staticmethod
    def usable(conn: Conn) -> bool:
        """True for an autocommit connection at rest where prepared statements are on."""
        return (
            conn.autocommit
            and conn.prepare_threshold is not None
            and conn.info.transaction_status is pq.TransactionStatus.IDLE
        )

    def first_value(self, conn: Conn, params: Mapping[str, Any]) -> Any:
        row = self.first_row(conn, params, 1)
        return None if row is None else row[0]

    def first_row(
        self, conn: Conn, params: Mapping[str, Any], width: int
    ) -> tuple[Any, ...] | None:
        """The first ``width`` columns of the first row (None: no row)."""
        encoding = conn.info.encoding
        values = [_text(params[name], encoding) for name in self.params]
        if conn not in self._prepared:
            self._prepare(conn)
        result = self._run(conn, lambda pgconn: pgconn.send_query_prepared(self.name, values))
        if _state(result) == _UNDEFINED_PREPARED_STATEMENT:  # the server forgot it
            self._prepare(conn)
            result = self._run(conn, lambda pgconn: pgconn.send_query_prepared(self.name, values))
        _raise_for(conn, result)
        if result.ntuples == 0:
            return None
        return tuple(_value(result, column, encoding) for column in range(width))

    def _prepare(self, conn: Conn) -> None:
        result = self._run(conn, lambda pgconn: pgconn.send_prepare(self.name, self.query))
        if _state(result) != _DUPLICATE_PREPARED_STATEMENT:  # there already: the same text
            _raise_for(conn, result)
        with self._lock:
            self._prepared[conn] = True

    @staticmethod
    def _run(conn: Conn, send: Any) -> pq.abc.PGresult:
        """Send, wait for and return the one result; the connection is closed if this is cut
        short with the statement in flight."""
        pgconn = conn.pgconn
        try:
            send(pgconn)
            result = _wait(pgconn)
        except BaseException:
            conn.close()
            raise
        return result


def _wait(pgconn: pq.abc.PGconn) -> pq.abc.PGresult:
    """Flush the request, then read until libpq has the whole reply: psycopg's wait, minus its
    generators. ``poll`` rather than ``select``: a descriptor above 1,023 is fine."""
    fd = pgconn.socket
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLOUT)
    while pgconn.flush():  # nonblocking: what did not fit in the socket's buffer yet
        poller.poll()
    poller.modify(fd, select.POLLIN)
    first: pq.abc.PGresult | None = None
    while True:  # get_result() would block in libpq while busy: read the socket until it is not
        pgconn.consume_input()
        while pgconn.is_busy():
            poller.poll()
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:  # the end of the reply
            break
        if first is None:
            first = result
    if first is None:
        raise psycopg.OperationalError("the server sent no result")
    return first


def _value(result: pq.abc.PGresult, column: int, encoding: str) -> Any:
    raw = result.get_value(0, column)
    return None if raw is None else _load(result.ftype(column), raw, encoding)


def _state(result: pq.abc.PGresult) -> bytes | None:
    if result.status == pq.ExecStatus.FATAL_ERROR:
        return result.error_field(pq.DiagnosticField.SQLSTATE)
    return None


def _raise_for(conn: Conn, result: pq.abc.PGresult) -> None:
    """Raise what psycopg raises for a failed result (its class by SQLSTATE, with diagnostics)."""
    if result.status in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
        return
    encoding = conn.info.encoding
    message = result.get_error_message(encoding)
    state = result.error_field(pq.DiagnosticField.SQLSTATE)
    if state is None:  # raised by libpq itself: the connection is gone
        raise psycopg.OperationalError(message or "the connection was lost")
    try:
        cls: type[psycopg.Error] = psycopg.errors.lookup(state.decode())
    except KeyError:
        cls = psycopg.DatabaseError
    raise cls(message, info=result, encoding=encoding)


def _text(value: Any, encoding: str) -> bytes | None:
    """A value as psycopg's text dumpers write it, in the connection's encoding."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, UUID) or (isinstance(value, int) and not isinstance(value, bool)):
        text = str(value)
    elif isinstance(value, float):
        text = repr(value)  # the shortest text that reads back as the same float, as psycopg's
    elif isinstance(value, datetime):
        text = value.isoformat()
    else:
        raise TypeError(f"a direct statement takes no {type(value).__name__} value")
    if "\x00" in text:
        raise psycopg.DataError(_NUL_REFUSED)
    return text.encode(encoding)


_UUID_OID = 2950
_BOOL_OID = 16
_TEXT_OIDS = frozenset({25, 1043})


def _load(oid: int, raw: bytes, encoding: str) -> Any:
    """A value back: a uuid, a boolean or text (what the direct statements return)."""
    if oid == _UUID_OID:
        return UUID(raw.decode("ascii"))
    if oid in _TEXT_OIDS:
        return raw.decode(encoding)
    if oid == _BOOL_OID:
        return raw == b"t"
    raise TypeError(f"a direct statement returns no value of type oid {oid}")
