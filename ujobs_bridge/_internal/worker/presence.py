"""A worker's node (``ujobs@host`` by default) and its remote-control mailbox, on Postgres.

Why it exists: operators ask "which workers are alive, on which queues, doing what" (a status
command, a dashboard, a health check) and steer them (resize, consume, shut down). Each worker
process registers a row in ``x_worker_nodes`` when it starts, renews it every heartbeat
interval and deletes it on a clean exit, so a node that stops renewing (SIGKILL, a partition) expires and is reaped by any worker's
sweep. Requests addressed to the node (or to every node) arrive as rows of
``x_control_requests``: a NOTIFY on the listener's existing connection wakes this loop at once
(``channel()``), polling finds them when no notification can arrive. Each is handled once, by
the ``Panel`` (``control.py``), and its reply written as a row the caller waits for. The node
row's ``info`` says which command sets (``control.CommandSet``) the node answers besides the
engine's (``command_sets``), so a caller waits only for the nodes that have its set.

It opens no connection of its own: it runs its statements on the worker's working connection,
which the claim loop and the heartbeat share (each holds it through ``using()`` for its
statements only: a command's handler runs without it). A database outage leaves the node
to be renewed, or registered again if it was reaped meanwhile, when the connection is back.

A ``Service`` (``service.py``): ``start()`` registers the node before the loop runs; ``stop()``
deletes it.

What it is not: the caller's side (``ujobs_bridge._internal.worker.remote``) or the commands (``control.py``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.db import mailbox, nodes
from ujobs_bridge._internal.db.connections import Reconnecting
from ujobs_bridge._internal.service import Service
from ujobs_bridge._internal.worker import fleet
from ujobs_bridge._internal.worker.config import DEFAULT_NODE_PREFIX
from ujobs_bridge._internal.worker.control import NO_REPLY, Panel, error_reply
from ujobs_bridge._internal.worker.listener import ExtraChannel
from ujobs_bridge.errors import ControlError, ErrorCode

log = logging.getLogger("ujobs.presence")

POLL_S = 1.0  # how often to look for requests when no notification can arrive
POLL_LISTENING_S = 5.0  # a floor while the listener hears x_control (a notification may be lost)
SWEEP_S = 15.0  # reap expired nodes and expired requests/replies
REPLY_TTL_S = 60.0


class Presence(Service):
    """Registers ``name`` for the worker ``worker_id``, renews it every ``beat_s`` for ``ttl_s``,
    handles its mailbox with ``panel`` and answers with ``encode`` (JSON text)."""

    def __init__(
        self,
        conn: Reconnecting,
        *,
        worker_id: str,
        name: str,
        ttl_s: float,
        beat_s: float,
        describe: Callable[[], nodes.NodeSpec],
        panel: Panel,
        encode: Callable[[Any], str] = json.dumps,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.conn = conn
        self.worker_id = worker_id
        self.name = name
        self.ttl_s = ttl_s
        self.beat_s = beat_s
        self.describe = describe
        self.panel = panel
        self.encode = encode
        self.clock = clock
        self.after_seq: int | None = None  # None: not registered (yet, or since it was reaped)
        self.registered = threading.Event()
        self.listening = threading.Event()  # x_control notifications can arrive
        self._wake = threading.Event()
        self._last_beat = 0.0
        self._sweeps = fleet.Chore(SWEEP_S)
        self.fleet = 1  # live nodes at the last beat: spreads the fleet-wide chores (fleet.py)
        super().__init__("presence", interval_s=POLL_S)

    # ------------------------------------------------------------------ wake-ups

    def channel(self) -> ExtraChannel:
        """The listener's hook: LISTEN on ``x_control``; a notification wakes this loop."""

        def on_connect(conn: psycopg.Connection[Any]) -> None:
            mailbox.listen_requests(conn)
            self.listening.set()
            self._wake.set()  # requests sent while nobody listened

        def on_notify(payload: str) -> None:
            self._wake.set()

        def on_closed() -> None:
            self.listening.clear()

        return ExtraChannel(mailbox.REQUEST_CHANNEL, on_connect, on_notify, on_closed)

    def refresh_soon(self) -> None:
        """Renew the node (and what it reports) at the next pass, not the next beat."""
        self._last_beat = 0.0
        self._wake.set()

    # ------------------------------------------------------------------ lifecycle

    def _on_start(self) -> None:
        try:
            with self.conn.using() as conn:
                self._beat(conn, time.monotonic())
        except psycopg.Error as exc:  # the loop registers it once the database answers
            log.warning("ujobs.presence.register_failed: %s", exc)
            self._reset_if_broken()

    def request_stop(self) -> None:
        super().request_stop()
        self._wake.set()

    def stop(self) -> None:
        self.request_stop()
        super().stop()

    def _on_stop(self) -> None:
        if not self.registered.is_set():  # never registered: nothing to delete, no connection
            return
        try:
            with self.conn.using() as conn:
                nodes.node_delete(conn, self.worker_id)
        except psycopg.Error as exc:  # the node expires on its own
            log.warning("ujobs.presence.delete_failed: %s", exc)
        self.registered.clear()
        self.after_seq = None

    def _pass(self) -> float:
        self.tick()
        wait = POLL_LISTENING_S if self.listening.is_set() else POLL_S
        self._wake.wait(min(wait, self.beat_s))
        self._wake.clear()
        return 0.0

    def _on_error(self, exc: Exception) -> float:
        self._reset_if_broken()
        return super()._on_error(exc)

    def _reset_if_broken(self) -> None:
        """Close the shared connection only if it is gone (the next ``using()`` also checks
        it): a statement error of ours must not cut the claim loop off."""
        if not self.conn.open:
            self.conn.reset()

    # ------------------------------------------------------------------ one pass

    def tick(self) -> int:
        """Renew the node when due, handle pending requests, sweep when due; returns how many
        requests were handled."""
        now = time.monotonic()
        if self.after_seq is None or now - self._last_beat >= self.beat_s:
            with self.conn.using() as conn:
                self._beat(conn, now)
        handled = self._handle()
        if self._sweeps.due(now, self.fleet):
            self._sweeps.ran(now)
            with self.conn.using() as conn:
                reaped = nodes.node_reap(conn, self.clock.sql_now())
                mailbox.control_expire(conn, self.clock.sql_now())
            if reaped:
                log.info("ujobs.presence.reaped: %s", ", ".join(sorted(set(reaped))))
        return handled

    def _beat(self, conn: psycopg.Connection[Any], now: float) -> None:
        spec = self.describe()
        spec = dataclasses.replace(
            spec, info={**spec.info, "command_sets": self.panel.command_sets}
        )
        sql_now = self.clock.sql_now()
        if self.after_seq is None or not nodes.node_heartbeat(conn, spec, self.ttl_s, sql_now):
            seq = nodes.node_register(conn, spec, self.ttl_s, sql_now)
            if self.after_seq is not None:
                log.warning("ujobs.presence.reregistered: node %s had expired", self.name)
            self.after_seq = max(seq, self.after_seq or 0)
            self.registered.set()
        self.fleet = nodes.nodes_fleet(conn, sql_now)
        self._last_beat = now

    def _handle(self) -> int:
        assert self.after_seq is not None
        with self.conn.using() as conn:
            pending = mailbox.control_pending(conn, self.name, self.after_seq, self.clock.sql_now())
        for request in pending:
            self.after_seq = request.seq  # handled once, even if the reply cannot be written
            value = self.panel.dispatch(request.command, _arguments(request.arguments))
            if request.reply and value is not NO_REPLY:
                reply = mailbox.ControlReply(self.worker_id, self.name, self._encoded(value))
                with self.conn.using() as conn:
                    mailbox.control_reply(
                        conn, request.id, reply, REPLY_TTL_S, self.clock.sql_now()
                    )
        return len(pending)

    def _encoded(self, value: Any) -> str:
        try:
            return self.encode(value)
        except (TypeError, ValueError) as exc:
            refused = ControlError(
                f"the reply could not be encoded: {exc!r}", code=ErrorCode.CONTROL_FAILED
            )
            return self.encode(error_reply(refused))


def _arguments(text: str) -> Mapping[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def host_of(name: str) -> str:
    """The host part of a node name (``ujobs@web1`` → ``web1``), else this machine's name."""
    _, at, host = name.partition("@")
    return host if at and host else socket.gethostname()


def default_node_name() -> str:
    """The engine's default node name: ``ujobs@<host>`` (celery_compat names a Celery app's
    worker ``celery@<host>`` itself)."""
    return f"{DEFAULT_NODE_PREFIX}@{socket.gethostname()}"
