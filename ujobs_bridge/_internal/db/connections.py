"""One connection policy for every connection the engine and the packages above it open.

Why it exists: each loop (claim loop, heartbeat, listener, leader, scheduler, relay, result
listener) and each pool (client, step writes, process-pool children) needs the same things from a
connection: autocommit unless the caller runs its own transaction, an ``application_name`` that
says which process and which role it serves (``pg_stat_activity`` reads like a process list), a
connect timeout so a dead server fails fast instead of hanging a loop, optionally an
idle-in-transaction limit (a paused process must not hold row locks forever), and reopening when
the server closed it. Written once here, the next policies have one place to go.

PgBouncer in transaction mode (``UJOBS_PGBOUNCER=1``, or ``--pgbouncer``, says so; nothing is
guessed): each transaction may run on another server session, so a connection through it carries
no session state. ``Role.kwargs`` then sends no ``options`` (a bouncer refuses the startup
parameter, or drops it silently) and turns psycopg's automatic server-side prepared statements
off (``prepare_threshold=None``); the callers that used session state do the same per transaction
(``set local``). LISTEN needs a session: ``listen_dsn`` names the connection wake-ups come from
(``UJOBS_LISTEN_URL`` / ``--listen-dsn``, a direct one), or None behind a bouncer without one:
then the loops poll. A bouncer nobody declared is met in two ways, and handled the same:
``detect_transaction_pooler`` (run once by a worker on its first connection) sees two
transactions of one client on different server sessions, or a prepared statement the server
session does not have (or already has: ``connection_state``) shows it. Either turns automatic
prepared statements off for this process from then on (``Role.kwargs``, and ``check`` on
connections already open) and logs ``ujobs.db.pgbouncer_detected`` once, with the fix.

The connection budget: loops of one process share a connection where that costs nothing
(``Reconnecting.using``: the worker's claim loop, heartbeat and node presence; the scheduler's
leader, rounds and outbox relay), and pools start empty and give back what stays idle
(``min_size`` 0, one connection per ``UJOBS_POOL_IDLE_S`` idle seconds), so a process at rest
holds only its loops' connections.

Outages (a restart, a failover, ``pg_terminate_backend``) are a policy too. ``transient(exc)``
says whether an error is the infrastructure's (the connection lost, the server shutting down or
"starting up", a serialization failure or deadlock: worth retrying, never a job's fault) or the
statement's; ``connection_state(exc)`` widens it to everything that is the connection's and not
the data's (also a prepared statement the session lost or already has, an aborted pipeline): the
one test before a batch is split to isolate a bad item; ``Backoff`` paces the retries; and no connection is handed out dead: pools and
``Reconnecting`` run ``check`` on checkout, which costs a zero-timeout ``poll()`` on the socket
and a round trip only when the server already said something (a connection the server closed
is readable at once: its goodbye, then end of file).

Instants Python cannot hold (``-infinity``, BC, past year 9999) in a row written by other means
are read as a ``FarInstant`` that shows the stored text (``far_instants.py``), on every connection,
so one such row fails no claim and no page.

What it is not: an owner. The loop or client that asks for a connection owns and closes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from ujobs_bridge._internal.db.far_instants import tolerate_far_instants
from ujobs_bridge.errors import ConfigError, ErrorCode

log = logging.getLogger("ujobs.db")

CONNECT_TIMEOUT_S = 5
APPLICATION_NAME_LIMIT = 63  # Postgres truncates longer names (NAMEDATALEN - 1)

ENV_PGBOUNCER = "UJOBS_PGBOUNCER"  # 1: every connection goes through a transaction pooler
ENV_LISTEN_URL = "UJOBS_LISTEN_URL"  # a direct connection for LISTEN (wake-ups)
ENV_POOL_IDLE = "UJOBS_POOL_IDLE_S"  # a pool gives back one connection per this many idle seconds
DEFAULT_POOL_IDLE_S = 60.0
_TRUE = ("1", "true", "yes", "on")

Conn = psycopg.Connection[Any]
Pool = ConnectionPool[Conn]
T = TypeVar("T")

# SQLSTATEs of the infrastructure, not of a statement: connection exceptions (class 08), the
# server shutting down or starting up (57P01-57P05), too many connections, and the two
# conflicts a retry resolves (serialization failure, deadlock).
TRANSIENT_CLASSES = ("08",)
TRANSIENT_STATES = frozenset(
    {"57P01", "57P02", "57P03", "57P04", "57P05", "53300", "40001", "40P01"}
)
# SQLSTATEs of a session that is not the one the client prepared its statements on: a prepared
# statement the server session does not have (invalid_sql_statement_name) or already has
# (duplicate_prepared_statement). Behind a transaction pooler, each transaction may run on
# another session: the connection's state, never the data's.
PROBE_ROUNDS = 10  # tries of detect_transaction_pooler before it says no pooler
SESSION_STATES = frozenset({"26000", "42P05"})

_pooler_seen = threading.Event()  # a transaction pooler was met undeclared: prepare nothing
_pooler_lock = threading.Lock()


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
        if behind_pgbouncer():
            # No server-side prepared statements (the next transaction may run on a session
            # that never saw them), no startup options (refused, or dropped: no session state).
            out["prepare_threshold"] = None
        elif self.idle_in_transaction_ms is not None:
            out["options"] = f"-c idle_in_transaction_session_timeout={self.idle_in_transaction_ms}"
        if _pooler_seen.is_set():
            out["prepare_threshold"] = None
        return out


def behind_pgbouncer() -> bool:
    """True when connections go through a transaction-mode pooler (``UJOBS_PGBOUNCER=1``): no
    session state, no prepared statements, no LISTEN on them."""
    return os.environ.get(ENV_PGBOUNCER, "").strip().lower() in _TRUE


def sessions_pooled() -> bool:
    """True when no session state may be relied on: declared (``behind_pgbouncer``) or met
    (``pooler_met``)."""
    return behind_pgbouncer() or _pooler_seen.is_set()


def pooler_met(how: str) -> bool:
    """Record that connections go through a transaction pooler nobody declared (``how``: what
    showed it): prepared statements are off for this process from now on, and the first call
    logs ``ujobs.db.pgbouncer_detected`` with the fix. True on that first call only."""
    if behind_pgbouncer():
        return False
    with _pooler_lock:
        if _pooler_seen.is_set():
            return False
        _pooler_seen.set()
    notice = ConfigError(
        f"connections go through a transaction-mode pooler (PgBouncer) that was not declared "
        f"({how}); server-side prepared statements are off for this process from now on",
        hint="set --pgbouncer (UJOBS_PGBOUNCER=1) so that no session state is used at all, "
        "and --listen-dsn (UJOBS_LISTEN_URL) for wake-ups",
        code=ErrorCode.PGBOUNCER_UNDECLARED,
    )
    log.warning("ujobs.db.pgbouncer_detected: %s", notice.render().replace("\n ", ";"))
    return True


def forget_pooler() -> None:
    """Forget a pooler met undeclared (``pooler_met``): the process's next connections prepare
    statements again. For a process whose connections now go elsewhere: a test suite that ran
    one test through a PgBouncer and the next straight to the server."""
    with _pooler_lock:
        _pooler_seen.clear()


def detect_transaction_pooler(conn: Conn, dsn: str) -> bool:
    """True (and ``pooler_met``) if ``conn`` (autocommit, idle) goes through a transaction-mode
    pooler: one client's statements run on different server sessions, or two clients' on the
    same one. A direct connection costs one round trip (the server's pid is the one its key
    data named); through a pooler, a second connection takes turns with ``conn``, neither
    holding a session while the other waits for one (a small pool cannot deadlock). Never True
    for a session-mode pooler."""
    if behind_pgbouncer() or _pooler_seen.is_set():
        return False
    first = _server_pid(conn)
    if first == conn.info.backend_pid:
        return False  # the server's own key data: no pooler in between
    with connect(dsn, Role("probe")) as other:
        for _ in range(PROBE_ROUNDS):  # another client may take the session in between
            if _server_pid(other) == first or _server_pid(conn) != first:
                return pooler_met("two connections ran on one server session")
    return False


def _server_pid(conn: Conn) -> int | None:
    row = conn.execute("select pg_backend_pid()").fetchone()
    return int(row[0]) if row else None


def use_pgbouncer(on: bool = True) -> None:
    """Declare (for this process and the processes it starts) that connections go through a
    transaction-mode pooler: what ``--pgbouncer`` does."""
    if on:
        os.environ[ENV_PGBOUNCER] = "1"
    else:
        os.environ.pop(ENV_PGBOUNCER, None)


def listen_dsn(dsn: str, explicit: str | None = None) -> str | None:
    """Where LISTEN connections go: ``explicit`` (``--listen-dsn``), else ``UJOBS_LISTEN_URL``,
    else ``dsn`` itself, unless that goes through a pooler: then None, and the caller polls."""
    chosen = explicit or os.environ.get(ENV_LISTEN_URL) or None
    if chosen is not None:
        return chosen
    return None if behind_pgbouncer() else dsn


def pool_idle_s() -> float:
    """How long a pooled connection may stay unused before the pool closes one
    (``UJOBS_POOL_IDLE_S``, default 60 s)."""
    raw = os.environ.get(ENV_POOL_IDLE, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_POOL_IDLE_S
    except ValueError:
        return DEFAULT_POOL_IDLE_S
    return value if value > 0 else DEFAULT_POOL_IDLE_S


class Busy(psycopg.OperationalError):
    """``Reconnecting.using(wait_s=...)`` gave up: another loop held the shared connection
    longer. The connection itself may be fine: do not reset it."""


def transient(exc: BaseException) -> bool:
    """True if ``exc`` is the infrastructure's (retry it, never charge a job for it): a lost or
    refused connection, a server shutting down or starting up, a serialization failure or a
    deadlock. An error of the statement itself (bad data, a constraint, a missing table) is not."""
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:  # raised by the client: the connection is gone, or a pool timed out
        return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
    return state.startswith(TRANSIENT_CLASSES) or state in TRANSIENT_STATES


def connection_state(exc: BaseException) -> bool:
    """True if ``exc`` is the connection's and not the data's: ``transient``, or a prepared
    statement the server session does not have or already has (``SESSION_STATES``: a transaction
    pooler), or a pipeline aborted by an earlier error. A batch failing so is retried on a fresh
    connection, never split to isolate an item. The prepared-statement errors also tell the
    policy a pooler is there (``pooler_met``)."""
    if transient(exc) or isinstance(exc, psycopg.errors.PipelineAborted):
        return True
    if not isinstance(exc, psycopg.Error) or exc.sqlstate not in SESSION_STATES:
        return False
    pooler_met(
        f"the server said: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc.sqlstate}"
    )
    return True


def check(conn: Conn) -> None:
    """Raise if ``conn`` is dead; the pool's (and ``Reconnecting``'s) check on checkout. An idle
    connection's socket is silent unless the server closed it (it says why, then hangs up) or
    sent a notice: only then is a round trip spent to find out which."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    if _pooler_seen.is_set() and conn.prepare_threshold is not None:
        conn.prepare_threshold = None  # opened before the pooler was met
    if conn.info.transaction_status is not psycopg.pq.TransactionStatus.IDLE:
        return  # in use (a transaction of its owner): its next statement will tell
    poller = select.poll()  # not select(): a socket numbered above 1,023 is fine
    poller.register(conn.fileno(), select.POLLIN)
    if poller.poll(0):
        ConnectionPool.check_connection(conn)


@dataclass(slots=True)
class Backoff:
    """Exponential pauses with jitter between retries of one failing thing: ``next()`` gives the
    pause to take now, ``reset()`` after a success."""

    base_s: float = 0.05
    cap_s: float = 5.0
    failures: int = 0
    random: Callable[[], float] = field(default=random.random, repr=False)

    def next(self) -> float:
        raw = min(self.cap_s, self.base_s * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return raw / 2 + raw / 2 * self.random()

    def reset(self) -> None:
        self.failures = 0


def retrying(
    op: Callable[[], T],
    *,
    within_s: float,
    gave_up: Callable[[], bool] = lambda: False,
    backoff: Backoff | None = None,
) -> T:
    """Run ``op`` until it returns; a transient error is retried with backoff for ``within_s``
    seconds (or until ``gave_up()``), then re-raised, as is any other error at once. Only for
    operations that are safe to run twice (idempotent, or whose caller reads back what landed)."""
    pace = backoff or Backoff()
    deadline = time.monotonic() + within_s
    while True:
        try:
            return op()
        except psycopg.Error as exc:
            pause = pace.next()
            if not transient(exc) or gave_up() or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)


def connect(dsn: str, role: Role) -> Conn:
    """A new connection under ``role``'s policy."""
    conn = psycopg.connect(dsn, **role.kwargs())
    tolerate_far_instants(conn)
    return conn


def pool(
    dsn: str, role: Role, *, min_size: int = 0, max_size: int = 4, name: str | None = None
) -> Pool:
    """An open pool whose connections follow ``role``'s policy and are checked on checkout (a
    connection the server closed is replaced, never handed out); ``name`` (the pool's own name
    in psycopg's logs) defaults to the role's application_name. It starts with ``min_size``
    connections (default none: opened on first use) and, above that, closes one connection per
    ``pool_idle_s()`` seconds in which it had one unused."""
    return ConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max(min_size, max_size, 1),
        kwargs=role.kwargs(),
        open=True,
        name=name or role.application_name,
        check=check,
        configure=tolerate_far_instants,
        max_idle=pool_idle_s(),
    )


class Reconnecting:
    """One long-lived connection of a loop: ``get()`` opens it, or opens it again once closed
    (by ``reset()`` after an error, or by the server: with ``checked``, ``get()`` runs ``check``
    first, so a loop's first statement after a restart does not fail on the old connection; a
    LISTEN connection passes ``checked=False``, since a new connection would not be listening).
    Thread-safe.

    Several loops of a process may share one: each runs its statements (or its transaction)
    inside ``with shared.using() as conn:``, which gives the connection to that thread alone
    until the block ends, so no loop's autocommit statement lands inside another's
    transaction. ``reset()`` waits for the block in flight."""

    def __init__(self, dsn: str, role: Role, *, checked: bool = True) -> None:
        self.dsn = dsn
        self.role = role
        self.checked = checked
        self._conn: Conn | None = None
        self._lock = threading.Lock()
        self._use = threading.RLock()

    @contextlib.contextmanager
    def using(self, *, wait_s: float | None = None) -> Iterator[Conn]:
        """The connection, for this thread alone until the block ends (re-entrant). ``wait_s``:
        wait at most that long for another user's block to end, else raise ``Busy``."""
        if not self._use.acquire(timeout=-1 if wait_s is None else wait_s):
            raise Busy(f"the shared connection ({self.role.application_name}) stayed busy")
        try:
            yield self.get()
        finally:
            self._use.release()

    def get(self) -> Conn:
        with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed and self.checked:
                try:
                    check(conn)
                except psycopg.Error:
                    conn.close()
            if conn is None or conn.closed:
                self._conn = conn = connect(self.dsn, self.role)
            return conn

    @property
    def open(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.closed

    def reset(self) -> None:
        """Close the connection (after an error: its state is unknown); the next ``get()``
        opens a fresh one."""
        with self._use, self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    close = reset
