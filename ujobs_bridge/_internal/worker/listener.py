"""LISTEN/NOTIFY wake-ups for an idle worker, on a dedicated connection.

Why it exists: polling alone makes pick-up latency the poll interval; a notification sent by the
insert at commit wakes the claim loop within a millisecond. The insert notifies only a queue some
worker has marked as waited for (migration 0021: the claim loop marks its queues before it waits
with free slots, and only while this listener listens), and only as many of the marked workers as
it made jobs ready, each on the channel it listens on alone (``wake_channel``, migration 0025),
so one job wakes one idle worker, not the fleet. It still hears ``x_jobs_ready``, which an older
version's insert sends to every worker. Polling stays the floor, so a lost
notification (connection drop, restart, a mark lost) costs at most one poll interval, never a job.
It also carries operator cancellations (``x_jobs_cancel``) so a cancel reaches a running body at
once instead of at the next heartbeat, and extra channels (``ExtraChannel``: celery_compat's
revoked task ids), so their owner needs no connection of its own and lives exactly as long as the
worker's listening does. Extra channels are passed to the constructor (``channels=``) by whoever
builds the worker (the ``-A`` loader says which an app needs); nothing registers one globally.

A ``Service`` (``service.py``): ``stop()`` lets the wait in flight end (at most 0.2 s), then
closes the connection. Its DSN is the listen DSN (``connections.listen_dsn``): a direct
connection, since LISTEN needs a session of its own; with none (behind PgBouncer without
``--listen-dsn``) ``start()`` does nothing and the worker's loops poll: new jobs within the poll
interval (``--poll``, 1 s), cancels at the next heartbeat, control requests within a second.

What it is not: a delivery mechanism. A notification only says "look"; the claim decides.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from ujobs_bridge._internal.db import connections, session
from ujobs_bridge._internal.db.connections import Role
from ujobs_bridge._internal.db.leases import handed_job
from ujobs_bridge._internal.service import Service
from ujobs_bridge.records import ClaimedJob

log = logging.getLogger("ujobs.listener")

READY_CHANNEL = "x_jobs_ready"
CANCEL_CHANNEL = "x_jobs_cancel"


@dataclass(frozen=True, slots=True)
class HandOffListening:
    """Hand-offs (migration 0027) on a listener: the ``channel`` they come on, the ``lock_key``
    the listen session holds while it hears them, ``take`` (a hand-off, or None for one that
    could not be read) and ``relisten`` (a fresh connection: ask for hand-offs missed while it
    was away). Both hooks run on the listener's thread."""

    channel: str
    lock_key: int
    take: Callable[[ClaimedJob | None], None]
    relisten: Callable[[], None]


@dataclass(frozen=True, slots=True)
class ExtraChannel:
    """An extra channel a ``Listener`` listens on (passed to its constructor). All three hooks
    run on the listener's thread. ``on_connect(conn)``, on each fresh connection: issue its own LISTEN,
    then catch up on what was sent while nobody listened (notifications are not queued for
    absent listeners). ``on_notify(payload)``: one notification. ``on_closed()``: that
    connection is gone (dropped or stopped); notifications may be missed until the next
    ``on_connect``. A hook that raises is logged and skipped: it never stops the wake-ups."""

    channel: str
    on_connect: Callable[[psycopg.Connection[Any]], None]
    on_notify: Callable[[str], None]
    on_closed: Callable[[], None]


class Listener(Service):
    """A ``Service`` whose pass waits up to 0.2 s for notifications on one kept connection;
    a dropped connection is re-opened after ``reconnect_s``, and then ``on_ready`` is called once
    for whatever was committed while nobody listened."""

    def __init__(
        self,
        dsn: str | None,
        *,
        queues: Collection[str],
        on_ready: Callable[[], None],
        on_cancel: Callable[[str], None],
        role: Role,
        channels: Sequence[ExtraChannel] = (),
        wake_channel: str | None = None,
        hand_off: HandOffListening | None = None,
        reconnect_s: float = 1.0,
    ) -> None:
        self.dsn = dsn
        self.queues = frozenset(queues)
        self.wake_channel = wake_channel  # this worker's own channel (its marks name it; 0025)
        self.hand_off = hand_off  # the hand-off channel and lock key (0027), if any
        self.hand_offs_live = threading.Event()  # set while this session can take hand-offs
        self.on_ready = on_ready
        self.on_cancel = on_cancel
        self.role = role
        self.channels = tuple(channels)
        self.reconnect_s = reconnect_s
        self._conn: psycopg.Connection[Any] | None = None
        self._joined: dict[str, ExtraChannel] = {}  # extra channels told about this connection
        self.listening = threading.Event()
        super().__init__("listener", interval_s=reconnect_s)

    @property
    def application_name(self) -> str:
        return self.role.application_name

    def start(self) -> None:
        """Start listening; without a listen DSN, nothing to start (the worker polls)."""
        if self.dsn is not None:
            super().start()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            assert self.dsn is not None, "no listen DSN: nothing to listen on"
            self._conn = connections.connect(self.dsn, self.role)
            session.listen_for_jobs(self._conn)
            if self.wake_channel is not None:
                session.listen_for_wake(self._conn, self.wake_channel)
            hand_off = self.hand_off
            if hand_off is not None:
                # LISTEN first, then the lock: a sender hands off only once the lock is held,
                # and by then this session hears the channel.
                session.listen_for_wake(self._conn, hand_off.channel)
                if session.hold_hand_off_lock(self._conn, hand_off.lock_key):
                    self.hand_offs_live.set()
                else:
                    log.warning(
                        "ujobs.listener.hand_off_lock: lock key %d is held by another session; "
                        "this worker is woken, never handed jobs",
                        hand_off.lock_key,
                    )
            self._join_extra(self._conn)
            self.listening.set()
            if hand_off is not None:
                hand_off.relisten()  # anything handed or committed while we were not listening
            else:
                self.on_ready()  # anything committed while we were not listening
        return self._conn

    def tick(self) -> int:
        """Deliver the notifications that arrive within 0.2 s (at most 64); returns how many."""
        seen = 0
        for note in self._connection().notifies(timeout=0.2, stop_after=64):
            seen += 1
            if note.channel == self.wake_channel:
                self.on_ready()  # an insert picked this worker's mark (payload: its queue)
            elif self.hand_off is not None and note.channel == self.hand_off.channel:
                self.hand_off.take(handed_job(note.payload))  # the job an insert claimed for it
            elif note.channel == READY_CHANNEL:
                if note.payload in self.queues:
                    self.on_ready()
            elif note.channel == CANCEL_CHANNEL:
                self.on_cancel(note.payload)
            elif note.channel in self._joined:
                self._hook(self._joined[note.channel].on_notify, note.payload)
        return seen

    def _join_extra(self, conn: psycopg.Connection[Any]) -> None:
        extras = {extra.channel: extra for extra in self.channels}  # the last one of a name wins
        for extra in extras.values():
            if self._hook(extra.on_connect, conn):
                self._joined[extra.channel] = extra

    def _hook(self, fn: Callable[..., None], *args: Any) -> bool:
        try:
            fn(*args)
        except Exception as exc:  # an extra channel must never stop the worker's wake-ups
            if isinstance(exc, psycopg.Error):
                log.warning("ujobs.listener.extra_channel: %s", exc)
            else:
                log.exception("ujobs.listener.extra_channel")
            return False
        return True

    def _pass(self) -> float:
        self.tick()
        return 0.0  # the wait for notifications is the pause

    def _on_error(self, exc: Exception) -> float:
        self._close()
        if isinstance(exc, psycopg.Error):
            log.warning("ujobs.listener.reconnect: %s", exc)
        else:
            log.exception("ujobs.listener.error")
        return self.reconnect_s

    def _on_stop(self) -> None:
        self._close()

    def _close(self) -> None:
        self.hand_offs_live.clear()
        self.listening.clear()
        joined, self._joined = self._joined, {}
        for extra in joined.values():
            self._hook(extra.on_closed)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
