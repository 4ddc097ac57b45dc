"""Riding through an outage of the database or the broker while ``migrate --follow`` drains.

Why it exists: a follower runs for weeks next to Celery; a database restart (``-m fast``, a
crash and its recovery, a failover, ``pg_terminate_backend``) or a broker that drops the
drainer's connection (a Redis restart, ``CLIENT KILL``, RabbitMQ closing the connection) must
not end it and need no supervisor. ``RideThrough.ride`` is what the drain loop calls when a
batch fails on such an error: it says so ONCE (the code, the URL or DSN masked), lets go of
everything in hand without acknowledging it (the source is closed: RabbitMQ requeues its
unacked deliveries, kombu restores them, Redis keeps them in this drainer's processing lists,
which the reopened source recovers first), reconnects with backoff (the engine's connection
policy: ``connections.Backoff`` and ``connections.transient``) and hands the loop a new
connection and a new source. Nothing is lost and nothing doubled: a batch whose commit landed
but whose acknowledgement did not comes back and the ledger absorbs it (``duplicate``). The
stop event (SIGTERM) ends the wait at once: the drain then exits 0, holding nothing.

There is no ``--max-outage``: like the worker, a follower waits for as long as the outage
lasts (the project has no such knob); a one-shot drain (no ``--follow``) still stops at the
first outage with ``UJ_DATABASE_UNAVAILABLE`` / ``UJ_BROKER_UNAVAILABLE`` (``cli/failure.py``).

What it is not: the drain loop (``runner.py``), nor a judge of messages: an error that is not
an outage (a missing table, a script error) is raised as before.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
from kombu.exceptions import OperationalError as KombuOperationalError

from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.ext.database import Backoff, mask_dsn, scrub, transient

if TYPE_CHECKING:
    from migrate.source import Source

log = logging.getLogger("migrate.drain")

Conn = psycopg.Connection[Any]
DATABASE = "database"
BROKER = "broker"
BASE_S = 0.2  # the first pause before reconnecting; doubled per failure (with jitter) ...
CAP_S = 5.0  # ... up to this

# The broker's connection failed (not a reply it gave): worth reconnecting. A Redis reply error
# (a script, a wrong type) or an AMQP channel error (a missing queue) is not an outage.
_OUTAGES = (
    OSError,  # sockets: refused, reset, broken pipe, timed out
    KombuOperationalError,
)


def _broker_outages() -> tuple[type[BaseException], ...]:
    """The client libraries' own outage errors, of the clients imported: an error of a client
    can only come from it once it is imported, and a drain imports only its broker's (redis-py
    for Redis, py-amqp for RabbitMQ), so neither is imported here for the other."""
    kinds: list[type[BaseException]] = list(_OUTAGES)
    redis = sys.modules.get("redis")
    if redis is not None:  # ConnectionError includes BusyLoadingError: a Redis loading its data
        kinds += [redis.ConnectionError, redis.TimeoutError]
    amqp = sys.modules.get("amqp.exceptions")
    if amqp is not None:  # RecoverableConnectionError includes ConnectionForced
        kinds += [amqp.RecoverableConnectionError, amqp.ConnectionError]
    return tuple(kinds)


def outage_of(exc: BaseException) -> str | None:
    """``DATABASE`` or ``BROKER`` when ``exc`` is that side's infrastructure failing (reconnect
    and go on), else None (raise it)."""
    if isinstance(exc, psycopg.Error):
        return DATABASE if transient(exc) else None
    if isinstance(exc, _broker_outages()):
        return BROKER
    return None


def _close_quietly(close: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):  # it is already broken: closing is best effort
        close()


@dataclass(eq=False)
class RideThrough:
    """How a follower waits out an outage: ``connect`` opens a database connection, ``reopen``
    a source on the same broker and queues; ``dsn`` and ``broker_url`` are only for the log
    (masked there, and their secrets scrubbed from any error text)."""

    dsn: str
    broker_url: str
    connect: Callable[[], Conn]
    reopen: Callable[[], Source]
    stop: threading.Event
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=BASE_S, cap_s=CAP_S))
    outages: int = 0  # how many outages this drain rode through (or is in)

    def ride(self, exc: BaseException, source: Source, conn: Conn) -> tuple[Source, Conn] | None:
        """Let go of ``source`` and ``conn`` (after ``exc``, an outage) and wait until both can
        be opened again: the new pair, or None once the stop event is set (nothing held)."""
        side = outage_of(exc)
        self.outages += 1
        self._said(side, exc)
        _close_quietly(source.close)
        _close_quietly(conn.close)
        began = time.monotonic()
        fresh_conn: Conn | None = None
        fresh_source: Source | None = None
        while not self.stop.is_set():
            try:
                if fresh_conn is None:
                    fresh_conn = self.connect()
                if fresh_source is None:
                    fresh_source = self.reopen()
                break
            except Exception as again:
                if outage_of(again) is None:
                    if fresh_conn is not None:
                        _close_quietly(fresh_conn.close)
                    raise
                log.debug("migrate.reconnect_failed: %s", self._text(again))
            self.stop.wait(self.backoff.next())
        if self.stop.is_set() or fresh_conn is None or fresh_source is None:
            if fresh_source is not None:
                _close_quietly(fresh_source.close)
            if fresh_conn is not None:
                _close_quietly(fresh_conn.close)
            log.info("migrate.outage_stopped: stopped during the outage; nothing is held")
            return None
        self.backoff.reset()
        log.info(
            "migrate.resumed: the %s is back after %.1f s; draining again (what was in hand "
            "is taken again, the ledger absorbs what was already committed)",
            side,
            time.monotonic() - began,
            extra={"outage_s": round(time.monotonic() - began, 3), "side": side},
        )
        return fresh_source, fresh_conn

    def _said(self, side: str | None, exc: BaseException) -> None:
        if side == DATABASE:
            where, code = mask_dsn(self.dsn), ErrorCode.DATABASE_UNAVAILABLE
        else:
            where, code = mask_dsn(self.broker_url), ErrorCode.BROKER_UNAVAILABLE
        log.warning(
            "migrate.outage: the %s %s is unavailable (%s) [%s]; nothing is lost: the batch in "
            "hand stays in the broker; reconnecting with backoff until it is back (SIGTERM "
            "exits cleanly meanwhile)",
            side,
            where,
            self._text(exc),
            code.value,
            extra={"code": code.value, "side": side},
        )

    def _text(self, exc: BaseException) -> str:
        text = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line
        return scrub(scrub(text, self.dsn), self.broker_url)
