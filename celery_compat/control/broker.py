"""Remote control over the cutover broker: the bridge worker's pidbox, answered by its own panel.

Why it exists: during a cutover the app still names a broker, and Flower (``/api/workers``, its
worker pages and buttons) and ``celery --broker=redis://... inspect|control`` (a command run
without the bridge app) broadcast remote control over that broker, through kombu's pidbox:
a fanout exchange (``celery.pidbox``) whose messages every Celery worker's node queue receives,
replies sent to the caller's reply queue. A bridge worker answers Postgres remote control
(``ujobs_bridge/worker/presence.py``); this service makes it answer the broker's too, as a
Celery worker's ``Pidbox`` bootstep does: a kombu ``Mailbox`` ``Node`` named after the worker's
node (``-n``) consumes the app's pidbox on the broker, and every command goes to the SAME
``Panel`` the Postgres mailbox dispatches to, as the command of its Celery set
(``celery.<command>``, ``worker_commands.py``: ``inspect stats``/``registered``/
``active_queues``, ``pool_grow``, ``rate_limit``, ``shutdown``...), so both paths give the same
answers and act the same way. Replies are kombu JSON, as the Postgres path writes them.

A ``Service`` thread with its own broker connection: ``start()``/``stop()``. A broker that is
down or goes away costs the worker nothing: one warning per outage
(``celery_compat.control.broker_unreachable``), a reconnect every ``RETRY_S``, one line when it
answers again; an error in a pass is logged and the loop goes on; the worker never waits on it
(``close`` gives up after a deadline). Started only when the app names a broker
(``broker_url`` / ``broker_read_url``) and ``worker_enable_remote_control`` is not False
(Celery's switch for the pidbox; Postgres remote control is answered either way).

What it is not: the Postgres mailbox (``presence.py``) or the commands (``worker_control.py``
and the engine's ``control.py``); nor a broker consumer of task messages.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kombu import pidbox
from kombu.utils import json as kombu_json

from celery_compat.control.names import command
from celery_compat.control.worker_commands import nok
from celery_compat.events.emitter import has_broker
from ujobs_bridge.ext.control import NO_REPLY, Panel
from ujobs_bridge.ext.worker import Service

log = logging.getLogger("celery_compat.control")

DRAIN_S = 1.0  # the longest a pass waits for a message (and stop() for a pass)
RETRY_S = 5.0  # between reconnects while the broker is away
CLOSE_TIMEOUT_S = 5.0
# A reply is published with a bounded retry (kombu's default retries forever: a broker gone
# between the request and the reply would hold this thread, and the worker's exit, on it).
REPLY_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
_loads: Callable[[str], Any] = kombu_json.loads  # typed here because kombu is not


def wanted(app: Any) -> bool:
    """The app names a broker (a cutover) and does not turn Celery's pidbox off."""
    return has_broker(app) and app.conf.get("worker_enable_remote_control", True) is not False


def mailbox_for(app: Any) -> Any:
    """The app's pidbox mailbox as ``app.control`` declares it (exchange, serializer, queue
    ttl/expiry), with no producer pool: replies go out on the node's own channel."""
    conf = app.conf
    make: Any = pidbox.Mailbox
    return make(
        conf.control_exchange,
        type="fanout",
        accept=conf.accept_content,
        serializer=conf.task_serializer,
        producer_pool=None,
        queue_ttl=conf.control_queue_ttl,
        reply_queue_ttl=conf.control_queue_ttl,
        queue_expires=conf.control_queue_expires,
        queue_exclusive=conf.control_queue_exclusive,
        queue_durable=conf.control_queue_durable,
        reply_queue_expires=conf.control_queue_expires,
    )


class PanelNode(pidbox.Node):
    """A pidbox node whose commands are the worker's ``Panel`` (Celery's set): the value, made
    plain JSON by the worker's encoder, is the reply; a command with no reply (``shutdown``)
    sends none."""

    def __init__(
        self, hostname: str, mailbox: Any, panel: Panel, encode: Callable[[Any], str]
    ) -> None:
        init: Any = super().__init__
        init(hostname, state=None, channel=None, handlers={}, mailbox=mailbox)
        self.panel = panel
        self.encode = encode

    def dispatch(
        self,
        method: str,
        arguments: Any = None,
        reply_to: Any = None,
        ticket: Any = None,
        **_: Any,
    ) -> Any:
        value = self.panel.dispatch(command(str(method)), dict(arguments or {}))
        if value is NO_REPLY:
            return None
        value = self._plain(value)
        if reply_to:
            mailbox: Any = self.mailbox
            mailbox._publish_reply(
                {self.hostname: value},
                reply_to["exchange"],
                reply_to["routing_key"],
                ticket,
                channel=self.channel,
                serializer=mailbox.serializer,
                retry_policy=REPLY_RETRY,
            )
        return value

    def _plain(self, value: Any) -> Any:
        try:
            return _loads(self.encode(value))
        except (TypeError, ValueError) as exc:
            return nok(f"the reply could not be encoded: {exc!r}")


class BrokerControl(Service):
    """The node ``hostname`` on ``app``'s broker, answering with ``panel``."""

    def __init__(self, app: Any, hostname: str, panel: Panel, encode: Callable[[Any], str]) -> None:
        super().__init__("celery-broker-control", interval_s=RETRY_S)
        self.app = app
        self.hostname = hostname
        self.panel = panel
        self.encode = encode
        self.listening = threading.Event()  # the node's queue consumes now
        self._conn: Any = None
        self._consumer: Any = None
        self._node: PanelNode | None = None
        self._down_since: float | None = None

    # ------------------------------------------------------------------ one pass

    def tick(self) -> int:
        """Connect if needed, then handle what arrives within ``DRAIN_S``; returns 1 when a
        message was handled, else 0."""
        if self._conn is None:
            self._connect()
        try:
            self._conn.drain_events(timeout=DRAIN_S)
        except TimeoutError:  # socket.timeout: nothing arrived
            return 0
        return 1

    def _pass(self) -> float:
        try:
            self.tick()
        except Exception as exc:  # kombu and its transports raise many kinds
            self._drop()
            self._failed(exc)
            return RETRY_S
        return 0.0

    def _connect(self) -> None:
        conn = self.app.connection_for_read()
        try:
            conn.ensure_connection(max_retries=1)
            mailbox = mailbox_for(self.app)(conn)
            node: Any = PanelNode(self.hostname, mailbox, self.panel, self.encode)
            node.channel = conn.channel()
            consumer = node.listen(callback=self._on_message)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.release()
            raise
        self._conn, self._node, self._consumer = conn, node, consumer
        self.listening.set()
        if self._down_since is not None:
            log.info(
                "celery_compat.control.broker_reachable: %s answers remote control on %s again",
                self.hostname,
                _where(conn),
            )
            self._down_since = None
        else:
            log.info(
                "celery_compat.control.broker_listening: %s answers remote control on %s",
                self.hostname,
                _where(conn),
            )

    def _on_message(self, body: Any, message: Any) -> None:
        self.app.clock.forward()  # as Celery's Pidbox: callers seldom carry a valid clock
        node: Any = self._node
        if node is None or not isinstance(body, dict):
            return
        try:
            node.handle_message(body, message)
        except Exception:  # a reply that could not be sent: the next pass reconnects if needed
            log.exception("celery_compat.control.broker_command_failed")

    def _failed(self, exc: BaseException) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning(
                "celery_compat.control.broker_unreachable: %s does not answer remote control on "
                "the broker (Postgres remote control still works); retried every %.0fs: %s",
                self.hostname,
                RETRY_S,
                exc,
            )

    def _drop(self) -> None:
        self.listening.clear()
        conn, self._conn = self._conn, None
        consumer, self._consumer = self._consumer, None
        node, self._node = self._node, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.cancel()
        if node is not None and node.channel is not None:
            with contextlib.suppress(Exception):
                node.channel.close()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.release()

    # ------------------------------------------------------------------ lifecycle

    def _on_stop(self) -> None:
        self._drop()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Stop, waiting at most ``timeout_s`` (a broker that hangs must not hold the worker's
        exit); True when it stopped in time."""
        if not self.running:
            return True
        stopper = threading.Thread(target=self.stop, name="ujobs-broker-control-close", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        if stopper.is_alive():
            log.warning("celery_compat.control.close_timeout: the broker's mailbox was left open")
            return False
        return True


def _where(conn: Any) -> str:
    try:
        return str(conn.as_uri())  # kombu masks the password
    except Exception:
        return "the broker"


def start(
    app: Any, hostname: str, panel: Panel, encode: Callable[[Any], str]
) -> BrokerControl | None:
    """The worker's broker mailbox, started, when ``wanted``; never raises (a worker whose
    broker mailbox cannot start runs without it)."""
    if not wanted(app):
        return None
    try:
        service = BrokerControl(app, hostname, panel, encode)
        service.start()
    except Exception:
        log.exception("celery_compat.control.broker_start_failed")
        return None
    return service
