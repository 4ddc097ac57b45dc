"""The engine's connection to one database: a small psycopg pool plus the enqueue entry points.

Why it exists: producers need somewhere to send jobs that is not a global. ``connect()`` resolves
the database (flag, env, embedded), checks the schema (read-only, ``schema_access``), and returns
a ``Client`` that owns an autocommit pool, so a one-by-one enqueue is one round trip and one
statement (``enqueue.OwnEnqueues``). The pool holds at most ``max_size`` connections (default
4), opens the first on first use and gives idle ones back (``connections.pool``): a producer at
rest holds none. Passing ``conn=`` instead runs the insert on the CALLER's connection, inside
the caller's transaction. ``send_commit`` is the client's default send commit
(``jobs/send_commit.py``): how durable an enqueue on the client's own connections is when it
returns.

What it is not: a worker, or the job registry. ``default_client()`` exists only so that
``my_job.enqueue()`` works in a script without wiring; anything long-lived should hold a Client.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Protocol
from uuid import UUID

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.config.dsn import ResolvedDatabase, resolve
from ujobs_bridge._internal.config.schema_access import ensure_schema
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db.enqueue import EnqueueSpec, OwnEnqueues
from ujobs_bridge._internal.ids import new_job_ids
from ujobs_bridge._internal.jobs import send_commit as commits
from ujobs_bridge._internal.jobs.send_commit import SendCommit
from ujobs_bridge._internal.observe import tracing
from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.records import JobRef

CLIENT_ROLE = connections.Role("client")


class Request(Protocol):
    """One row to insert, as ``enqueue_many`` takes it: ``job.call(...)``, an ``EnqueueRequest``
    (``job.py``, which builds on this module, so the client names what it needs of one)."""

    def spec_as(self, job_id: UUID, context: str | None) -> EnqueueSpec: ...


def specs_of(requests: Iterable[Request]) -> list[EnqueueSpec]:
    """The rows of a batch (``enqueue_many``), each validated as ``spec()`` validates one: ids
    from one read of the OS's randomness, the trace context read once (the whole batch is built
    in the caller's one context)."""
    if not isinstance(requests, Iterable) or isinstance(requests, str | bytes):
        raise ConfigError(
            f"enqueue_many takes job calls, got {type(requests).__name__}",
            hint="pass a list of my_job.call(...) requests",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    batch = requests if isinstance(requests, list) else list(requests)
    for position, request in enumerate(batch):
        if not callable(getattr(request, "spec_as", None)):
            raise ConfigError(
                f"enqueue_many: item {position} is {type(request).__name__} "
                f"{str(request)[:80]!r}, not a job call",
                hint="build each item with my_job.call(...) or my_job.configure(...).call(...)",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
    context = tracing.current_traceparent()
    return [
        r.spec_as(job_id, context) for r, job_id in zip(batch, new_job_ids(len(batch)), strict=True)
    ]


class Client:
    def __init__(
        self,
        database: ResolvedDatabase,
        *,
        clock: Clock = SYSTEM_CLOCK,
        min_size: int = 0,
        max_size: int = 4,
        send_commit: SendCommit = commits.DEFAULT,
    ) -> None:
        self.database = database
        self.dsn = database.dsn
        self.clock = clock
        self.send_commit: SendCommit = commits.checked(send_commit, what="send_commit")
        self.pool: connections.Pool = connections.pool(
            self.dsn, CLIENT_ROLE, min_size=min_size, max_size=max_size, name="ujobs-client"
        )
        self._own = OwnEnqueues()

    def __repr__(self) -> str:
        return f"Client({self.database.masked})"

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def enqueue_spec(
        self,
        spec: EnqueueSpec,
        conn: psycopg.Connection[Any] | None = None,
        send_commit: SendCommit | None = None,
    ) -> JobRef:
        """Insert ``spec``: on ``conn`` in the caller's transaction, else on a pooled connection
        as one statement committed with ``send_commit`` (None: the client's)."""
        now = self.clock.sql_now()
        if conn is not None:
            if send_commit is not None:
                raise commits.refused_in_transaction("send_commit")
            return enqueue_db.job_enqueue(conn, spec, now)
        level = commits.level(send_commit or self.send_commit)
        # Borrowed and given back without ``pool.connection()``: its ``with conn:`` commit
        # (nothing to commit in autocommit), its timing stats and its generator are work a
        # one-by-one enqueue need not pay. ``putconn`` still rolls back a connection returned
        # in a transaction and replaces a broken one; the checkout still runs the pool's check.
        pool = self.pool
        pooled = pool.getconn()
        try:
            return self._own.enqueue(pooled, spec, now, level)
        finally:
            pool.putconn(pooled)

    def enqueue_many(
        self,
        requests: Iterable[Request],
        *,
        conn: psycopg.Connection[Any] | None = None,
        send_commit: SendCommit | None = None,
    ) -> list[JobRef]:
        """Enqueue ``job.call(...)`` requests in one statement (one transaction): on ``conn`` in
        the caller's transaction, else on a pooled connection, committed with ``send_commit``
        (None: the client's)."""
        if send_commit is not None:
            commits.checked(send_commit, what="send_commit")
            if conn is not None:
                raise commits.refused_in_transaction("send_commit")
        specs: Sequence[EnqueueSpec] = specs_of(requests)
        now = self.clock.sql_now()
        if conn is not None:
            return enqueue_db.job_enqueue_many(conn, specs, now)
        level = commits.level(send_commit or self.send_commit)
        with self.pool.connection() as pooled, pooled.transaction():
            enqueue_db.set_send_commit(pooled, level)
            return enqueue_db.job_enqueue_many(pooled, specs, now)


def connect(
    dsn: str | None = None,
    *,
    clock: Clock = SYSTEM_CLOCK,
    upgrade: bool | None = None,
    max_size: int = 4,
    send_commit: SendCommit = commits.DEFAULT,
) -> Client:
    """Open a Client on ``dsn`` (else ``UJOBS_DATABASE_URL``, else the embedded Postgres).

    The schema is checked read-only and a missing migration refused with the fix; ``upgrade=None``
    applies it only on the embedded database or under ``UJOBS_AUTO_UPGRADE=1``, ``True`` always,
    ``False`` skips the check (the caller vouches for the schema, as test kits do).
    ``send_commit``: how durable an enqueue on the client's own connections is when it returns
    (``"on"``, the default: flushed; ``"local"``; ``"off"``: see the guarantees page)."""
    commits.checked(send_commit, what="send_commit")
    if dsn is not None and not isinstance(dsn, str):
        raise ConfigError(
            f"the database DSN must be text, got {type(dsn).__name__}",
            hint="pass a postgresql:// URL or a libpq 'key=value' string",
            code=ErrorCode.DSN_INVALID,
        )
    database = resolve(dsn, given_as="database DSN")
    if upgrade is not False:
        ensure_schema(database, upgrade=upgrade)
    return Client(database, clock=clock, max_size=max_size, send_commit=send_commit)


_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process-wide Client used when ``enqueue`` is given neither ``client=`` nor ``conn=``."""
    global _default
    with _default_lock:
        if _default is None:
            _default = connect()
            atexit.register(_default.close)
        return _default


def set_default_client(client: Client | None) -> None:
    global _default
    with _default_lock:
        _default = client
