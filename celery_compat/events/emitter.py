"""Where Celery events go: a bounded buffer per process, flushed in batches to Postgres and the broker.

Why it exists: an event must cost a task next to nothing and must never fail or hold it up, yet
it has to reach two places: ``x_celery_events`` (read by a dashboard, ``event_log.py``) and, when
the app still has a broker (a cutover: ``broker_url`` is set), the broker's ``celeryev`` exchange,
where an unchanged Flower or ``celery events`` reads Celery's events. So ``emit`` only builds the
event (Celery's ``Event`` with the fields Celery's dispatcher adds: hostname, utcoffset, pid, the
app's Lamport clock, the timestamp) and appends it to two bounded deques; a ``Service`` thread
flushes them every ``interval_s`` (sooner when a batch is full): ONE insert statement per batch,
and one broker message per batch and node (``task.multi`` / ``worker.multi``, the batched form
Celery's own worker publishes and every event receiver reads), sent through the app's own event
dispatcher (``app.events.Dispatcher``) on one broker connection owned by the flusher thread.

Faults: a broker or database that is down costs the flusher, never a task. The first failure
of an outage logs ONE warning (per destination); events keep arriving in the bounded buffer,
the oldest are dropped once it is full (counted), the flusher retries every ``RETRY_S``, and the
recovery is logged with the number dropped. A batch the database refuses as data (not a
connection error) is dropped with a warning instead of blocking the ones behind it. Shutdown
flushes what it can within a deadline (``close``) and never waits on a dead broker.

One emitter per app and process (``emitter_for``): the worker's main process, each pool child,
and any process that sends tasks with ``task_send_sent_event``.

What it is not: the decision of which events exist and what they hold (``task_events.py``,
``worker_events.py``) or the on/off switch (``event_switch.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import psycopg
from celery.events.event import Event, group_from
from celery.utils.time import utcoffset

from celery_compat.db import events as events_db
from ujobs_bridge.ext.database import Reconnecting, Role, mask_dsn
from ujobs_bridge.ext.observe import redact_repr, redact_text
from ujobs_bridge.ext.worker import Service

log = logging.getLogger("celery_compat.events")

BUFFER_LIMIT = 10_000  # events held per destination while it is unreachable (oldest dropped)
# Batch sizes bound how long the flusher holds the GIL in one go (encoding a batch is pure CPU,
# more per event through kombu than for Postgres). The worker's claim loop and body threads
# return from I/O constantly and each must wait for the GIL while the flusher holds it (up to the
# switch interval per wait): batches of thousands of events convoyed them and cut ``-E``'s
# throughput. A few hundred events per statement and a hundred per message keep each hold short;
# the I/O between batches gives the GIL back.
PG_BATCH = 250
BROKER_BATCH = 100
INTERVAL_S = 0.25
RETRY_S = 5.0
CLOSE_TIMEOUT_S = 5.0
UTCOFFSET_S = 1.0


# Event fields that carry a task's data as text (Celery's ``args``/``kwargs`` are the reprs).
_REPR_FIELDS = frozenset({"args", "kwargs"})
_TEXT_FIELDS = _REPR_FIELDS | {"exception", "traceback", "result", "einfo"}


def has_broker(app: Any) -> bool:
    """Does the app still name a broker (a cutover), where Celery's monitors read events?"""
    conf = app.conf
    return bool(conf.get("broker_write_url") or conf.broker_url)


class _Destination:
    """One place events go: its bounded buffer and its outage bookkeeping."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.pending: deque[dict[str, Any]] = deque(maxlen=limit)
        self.dropped = 0  # since the outage began
        self.sent = 0
        self.down_since: float | None = None
        self.retry_at = 0.0

    def add(self, event: dict[str, Any]) -> None:
        pending = self.pending
        if len(pending) == pending.maxlen:
            self.dropped += 1  # the append below pushes the oldest out
        pending.append(event)

    def take(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        pending = self.pending
        with contextlib.suppress(IndexError):
            while len(out) < n:
                out.append(pending.popleft())
        return out

    def put_back(self, batch: list[dict[str, Any]]) -> None:
        room = (self.pending.maxlen or 0) - len(self.pending)
        keep = batch[-room:] if room > 0 else []
        self.dropped += len(batch) - len(keep)
        self.pending.extendleft(reversed(keep))

    def failed(self, exc: BaseException, where: str) -> None:
        now = time.monotonic()
        self.retry_at = now + RETRY_S
        if self.down_since is None:
            self.down_since = now
            log.warning(
                "celery_compat.events.%s_unreachable: events for %s are held (up to %d, the "
                "oldest dropped) and retried every %.0fs; tasks are not affected: %s",
                self.name,
                where,
                self.pending.maxlen,
                RETRY_S,
                exc,
            )

    def succeeded(self, count: int, where: str) -> None:
        self.sent += count
        if self.down_since is not None:
            log.warning(
                "celery_compat.events.%s_reachable: events flow to %s again after %.1fs; "
                "%d dropped meanwhile",
                self.name,
                where,
                time.monotonic() - self.down_since,
                self.dropped,
            )
            self.down_since = None
            self.dropped = 0

    def due(self) -> bool:
        return bool(self.pending) and time.monotonic() >= self.retry_at


class EventEmitter(Service):
    """Buffers Celery events and flushes them to ``x_celery_events`` (when ``dsn``) and to the
    app's broker (when ``broker``)."""

    def __init__(
        self,
        app: Any,
        *,
        dsn: str | None,
        broker: bool,
        interval_s: float = INTERVAL_S,
        limit: int = BUFFER_LIMIT,
    ) -> None:
        super().__init__("celery-events", interval_s=interval_s)
        self.app = app
        self.clock = app.clock
        self.dsn = dsn
        self.broker = broker
        self.postgres = _Destination("postgres", limit) if dsn else None
        self.mq = _Destination("broker", limit) if broker else None
        self._conn = Reconnecting(dsn, Role(f"events:{os.getpid()}")) if dsn else None
        self._broker_conn: Any = None
        self._dispatchers: dict[str, Any] = {}
        self._wake = threading.Event()
        self._offset: tuple[float, Any] | None = None

    # -- the hot path ------------------------------------------------------------------------------

    def emit(self, type_: str, hostname: str, pid: int, **fields: Any) -> dict[str, Any]:
        """Build the event as Celery's dispatcher would send it and queue it; no I/O. Its
        argument reprs, exception, traceback and result go out with their secrets hidden."""
        for key in _TEXT_FIELDS.intersection(fields):
            value = fields[key]
            if isinstance(value, str):
                fields[key] = redact_repr(value) if key in _REPR_FIELDS else redact_text(value)
        event: dict[str, Any] = Event(
            type_,
            hostname=hostname,
            utcoffset=self._utcoffset(),
            pid=pid,
            clock=self.clock.forward(),
            **fields,
        )
        full = False
        for destination in (self.postgres, self.mq):
            if destination is not None:
                destination.add(event)
                full = full or len(destination.pending) >= BROKER_BATCH
        if full and not self._wake.is_set():  # set() takes a lock: once per batch, not per event
            self._wake.set()
        return event

    def _utcoffset(self) -> Any:
        """Celery's ``utcoffset()`` (hours), re-read at most every ``UTCOFFSET_S`` seconds: it
        changes only at a DST switch, and reading the local time per event is measurable."""
        now = time.monotonic()
        cached = self._offset
        if cached is None or now >= cached[0]:
            cached = self._offset = (now + UTCOFFSET_S, utcoffset())
        return cached[1]

    def wake(self) -> None:
        """Flush soon (a worker event should not wait for the interval)."""
        self._wake.set()

    # -- the flusher ---------------------------------------------------------------------------------

    def _pass(self) -> float:
        self._wake.wait(self.interval_s)
        self._wake.clear()
        self.tick()
        return 0.0

    def tick(self) -> int:
        """Flush what is due to each destination; returns how many events went."""
        sent = 0
        if self.postgres is not None and self.postgres.due():
            sent += self._flush_postgres(self.postgres)
        if self.mq is not None and self.mq.due():
            sent += self._flush_broker(self.mq)
        return sent

    def _flush_postgres(self, dest: _Destination) -> int:
        assert self._conn is not None and self.dsn is not None
        sent = 0
        while dest.pending:
            batch = dest.take(PG_BATCH)
            try:
                events_db.insert_events(self._conn.get(), batch)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._conn.reset()
                dest.put_back(batch)
                dest.failed(exc, mask_dsn(self.dsn))
                return sent
            except psycopg.Error as exc:  # the data, not the connection: never block the rest
                log.warning(
                    "celery_compat.events.batch_refused: %d events not stored: %s", len(batch), exc
                )
                self._conn.reset()
                continue
            sent += len(batch)
            dest.succeeded(len(batch), "Postgres")
        return sent

    def _flush_broker(self, dest: _Destination) -> int:
        sent = 0
        while dest.pending:
            batch = dest.take(BROKER_BATCH)
            try:
                for (hostname, group), events in _by_node_and_group(batch):
                    self._publish(hostname, group, events)
            except Exception as exc:  # kombu and the transports raise many kinds
                self._drop_broker()
                dest.put_back(batch)
                dest.failed(exc, self._broker_where())
                return sent
            sent += len(batch)
            dest.succeeded(len(batch), self._broker_where())
        return sent

    def _publish(self, hostname: str, group: str, events: list[dict[str, Any]]) -> None:
        """One message for a node's batch, through the app's event dispatcher: what its
        ``flush()`` publishes for a buffered group (``<group>.multi``); every event receiver
        (Flower, ``celery events``, ``app.events.Receiver``) reads a batch as its events."""
        dispatcher = self._dispatchers.get(hostname)
        if dispatcher is None:
            if self._broker_conn is None:
                self._broker_conn = self.app.connection_for_write()
            dispatcher = self.app.events.Dispatcher(
                self._broker_conn, hostname=hostname, enabled=True, buffer_while_offline=False
            )
            self._dispatchers[hostname] = dispatcher
        with dispatcher.mutex:
            dispatcher._publish(events, dispatcher.producer, routing_key=f"{group}.multi")

    def _broker_where(self) -> str:
        conn = self._broker_conn
        try:
            return str(conn.as_uri()) if conn is not None else "the broker"
        except Exception:
            return "the broker"

    def _drop_broker(self) -> None:
        conn, self._broker_conn = self._broker_conn, None
        dispatchers, self._dispatchers = self._dispatchers, {}
        for dispatcher in dispatchers.values():
            with contextlib.suppress(Exception):
                dispatcher.close()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.release()

    def _on_stop(self) -> None:
        """A last flush of what is due (a destination in an outage is not waited on)."""
        try:
            self.tick()
        except Exception:
            log.exception("celery_compat.events.final_flush")
        self._drop_broker()
        if self._conn is not None:
            self._conn.close()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Stop with a last flush, waiting at most ``timeout_s`` (a broker that hangs must not
        hold the worker's exit); True when it finished in time."""
        if not self.running:
            return True
        stopper = threading.Thread(target=self.stop, name="ujobs-celery-events-close", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        if stopper.is_alive():
            log.warning("celery_compat.events.close_timeout: unsent events were left behind")
            return False
        return True


def _by_node_and_group(
    batch: Iterable[dict[str, Any]],
) -> list[tuple[tuple[str, str], list[dict[str, Any]]]]:
    """Consecutive runs of one node's events of one group, in order."""
    out: list[tuple[tuple[str, str], list[dict[str, Any]]]] = []
    for event in batch:
        key = (str(event.get("hostname") or ""), group_from(str(event["type"])))
        if out and out[-1][0] == key:
            out[-1][1].append(event)
        else:
            out.append((key, [event]))
    return out


# -- one emitter per app and process ---------------------------------------------------------------

# keyed by (pid, app): a forked process (a preforking web server) starts its own flusher thread
_emitters: dict[tuple[int, int], EventEmitter] = {}
_lock = threading.Lock()


def _default_dsn(app: Any) -> str | None:
    client = getattr(app, "ujobs_client", None)  # a celery_compat app; plain Celery has none
    return str(client.dsn) if client is not None else None


def emitter_for(app: Any, dsn: str | None = None) -> EventEmitter:
    """This process's emitter for ``app``, started on first use: events go to ``dsn`` (else the
    app's jobs database) and, when the app names a broker, there too."""
    with _lock:
        key = (os.getpid(), id(app))
        emitter = _emitters.get(key)
        if emitter is None:
            emitter = EventEmitter(app, dsn=dsn or _default_dsn(app), broker=has_broker(app))
            _emitters[key] = emitter
            emitter.start()
        return emitter


def close_emitter(app: Any, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
    """Flush and stop ``app``'s emitter in this process (a new one starts on the next event)."""
    with _lock:
        emitter = _emitters.pop((os.getpid(), id(app)), None)
    if emitter is not None:
        emitter.close(timeout_s)


@atexit.register
def _close_all() -> None:
    with _lock:
        emitters = [e for (pid, _), e in _emitters.items() if pid == os.getpid()]
        _emitters.clear()
    for emitter in emitters:
        emitter.close(CLOSE_TIMEOUT_S)
