"""One connection policy for every connection the engine and the packages above it open.

Why it exists: each loop (claim loop, heartbeat, listener, leader, scheduler, relay, result
listener) and each pool (client, step writes, process-pool children) needs the same things from a
connection: autocommit unless the caller runs its own transaction, an ``application_name`` that
says which process and which role it serves (``pg_stat_activity`` reads like a process list), a
connect timeout so a dead server fails fast instead of hanging a loop, optionally an
idle-in-transaction limit (a paused process must not hold row locks forever), and reopening when
the server closed it. Written once here, the next policies (reconnect backoff, PgBouncer
transaction mode, a connection budget) have one place to go.

What it is not: an owner. The loop or client that asks for a connection owns and closes it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

CONNECT_TIMEOUT_S = 5
APPLICATION_NAME_LIMIT = 63  # Postgres truncates longer names (NAMEDATALEN - 1)

Conn = psycopg.Connection[Any]
Pool = ConnectionPool[Conn]


@dataclass(frozen=True, slots=True)
class Role:
    """What a connection is for: shown as ``application_name`` (``ujobs:<role>``)."""

    name: str
    autocommit: bool = True
    idle_in_transaction_ms: int | None = None  # the server ends a transaction left idle longer

    @property
    def application_name(self) -> str:
        return f"ujobs:{self.name}"[:APPLICATION_NAME_LIMIT]

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "autocommit": self.autocommit,
            "application_name": self.application_name,
            "connect_timeout": CONNECT_TIMEOUT_S,
        }
        if self.idle_in_transaction_ms is not None:
            out["options"] = f"-c idle_in_transaction_session_timeout={self.idle_in_transaction_ms}"
        return out


def connect(dsn: str, role: Role) -> Conn:
    """A new connection under ``role``'s policy."""
    return psycopg.connect(dsn, **role.kwargs())


def pool(
    dsn: str, role: Role, *, min_size: int = 1, max_size: int = 4, name: str | None = None
) -> Pool:
    """An open pool whose connections follow ``role``'s policy; ``name`` (the pool's own name in
    psycopg's logs) defaults to the role's application_name."""
    return ConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max(min_size, max_size),
        kwargs=role.kwargs(),
        open=True,
        name=name or role.application_name,
    )


class Reconnecting:
    """One long-lived connection of a loop: ``get()`` opens it, or opens it again once closed
    (by ``reset()`` after an error, or by the server). Thread-safe."""

    def __init__(self, dsn: str, role: Role) -> None:
        self.dsn = dsn
        self.role = role
        self._conn: Conn | None = None
        self._lock = threading.Lock()

    def get(self) -> Conn:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.dsn, self.role)
            return self._conn

    @property
    def open(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.closed

    def reset(self) -> None:
        """Close the connection (after an error: its state is unknown); the next ``get()``
        opens a fresh one."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    close = reset
