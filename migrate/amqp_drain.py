"""Drain RabbitMQ (py-amqp): manual acks, sent only after the batch is committed.

Why it exists: on RabbitMQ the broker itself keeps a delivered message until it is acked, so
the contract is simple and exact: consume with ``no_ack=False`` (one consumer per queue,
``basic_qos`` prefetch = a few batches, which quorum queues support), insert + COMMIT the batch,
then ack it: ONE ``basic_ack(multiple=True)`` on its last delivery tag when the batch is every
delivery up to that tag (the usual case), else one ack per delivery. Deliveries are read by
``amqp_frames.DeliveryReader`` (whole frames cut out of large socket reads), everything else by
py-amqp. No delivery waits unacked longer than the few batches ahead of it take to commit, far
below RabbitMQ's ``consumer_timeout`` (30 minutes by default). A drainer killed in between loses its connection, RabbitMQ requeues
the deliveries (``redelivered``), and the ledger absorbs them on the next run. A poison message
is quarantined and ACKED, never ``nack(requeue=True)`` (that is a redelivery loop).

Native delayed delivery (Celery ≥ 5.5 on quorum queues): countdown/ETA messages wait in the
``celery_delayed_0..27`` queues, routed by ``<28 bits>.<routing key>``. They are read with
``basic_get`` passes (when the consumed queues have nothing for a take, and at most once a
second while they do); a message whose destination queue (the routing key after the 28 bits) is
one being drained becomes a row of THAT queue (its ``eta`` header still holds the absolute
time); a message for another queue is held unacked until the pass ends, then returned with
``basic_reject(requeue=True)``, so it is seen once per pass and never looped on.

Limits, said plainly: messages a live Celery worker holds unacked (prefetch, classic-queue ETA
messages) are invisible until that worker's channel closes; stop or drain Celery workers first.
AMQP cannot list queues: ``--all-queues`` asks the management API (``amqp_queues.py``).

What it is not: kombu's consumer (no ``Message.decode()``: bodies go to ``decoding.py`` raw).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import amqp
from amqp import method_framing
from amqp.basic_message import Message as _Message
from kombu.connection import Connection as _Connection

from migrate.amqp_frames import DeliveryReader
from migrate.appinfo import AppInfo
from migrate.batch import Taken
from migrate.decoding import Envelope

DELAYED_LEVELS = 28
DELAYED_QUEUES = tuple(f"celery_delayed_{level}" for level in range(DELAYED_LEVELS - 1, -1, -1))
_DELAY_PREFIX = re.compile(r"^(?:[01]\.){" + str(DELAYED_LEVELS) + "}")
Connection: Any = _Connection  # kombu is untyped here
_PROPERTY_KEYS = (
    "correlation_id",
    "reply_to",
    "delivery_mode",
    "priority",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
)


def _meta(properties: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """The envelope metadata of one delivery: AMQP values as py-amqp decoded them (made
    JSON-safe only if quarantined)."""
    kept = {k: v for k in _PROPERTY_KEYS if (v := properties.get(k)) is not None}
    kept["delivery_info"] = {
        "exchange": info.get("exchange") or "",
        "routing_key": info.get("routing_key") or "",
        "redelivered": bool(info.get("redelivered")),
    }
    return {
        "content_type": properties.get("content_type") or "application/data",
        "content_encoding": properties.get("content_encoding") or "utf-8",
        "headers": dict(properties.get("application_headers") or {}),
        "properties": kept,
    }


def _delivery(
    queue: str,
    body: bytes,
    meta: dict[str, Any],
    tag: int,
    problem: str | None = None,
    size: int | None = None,
) -> Taken:
    """``size``: the whole message as received (properties and body), for ``--max-bytes``."""
    envelope = Envelope(
        body,
        meta["content_type"],
        meta["content_encoding"],
        meta["headers"],
        meta["properties"],
        size=len(body) if size is None else size,
    )
    return Taken(body, "amqp", queue, envelope, meta, tag, problem)


def _properties_size(msg: Any, body: bytes) -> int:
    """What py-amqp read for ``msg``: its properties as encoded on the wire, and its body."""
    try:
        return len(msg._serialize_properties()) + len(body)
    except Exception:  # values py-amqp cannot encode back: the body alone is still measured
        return len(body)


def _taken(msg: Any, queue: str) -> Taken:
    """A message py-amqp read (``basic_get``, or a delivery it was handed); one whose properties
    did not decode (``_TolerantMessage``) comes with its ``problem``: quarantined, malformed."""
    body = msg.body if isinstance(msg.body, bytes | bytearray) else str(msg.body).encode("utf-8")
    meta = _meta(dict(msg.properties or {}), dict(msg.delivery_info or {}))
    body = bytes(body)
    problem = getattr(msg, "undecodable", None)
    return _delivery(queue, body, meta, msg.delivery_tag, problem, size=_properties_size(msg, body))


class _TolerantMessage(_Message):  # type: ignore[misc]  # py-amqp is untyped
    """py-amqp's message, except that properties it cannot decode (a ``T`` timestamp past year
    9999 or past what the platform's clock holds, a table nested past the recursion limit) leave
    it with no properties and the reason in ``undecodable``, instead of raising out of the frame
    handler: the delayed queues' ``basic_get``, ``--dry-run`` and the reader used when
    ``DeliveryReader`` cannot be then quarantine that one message (``malformed``), as the main
    path does, instead of stopping the drain."""

    undecodable: str | None = None

    def _load_properties(self, class_id: int, buf: Any, offset: int) -> int:
        try:
            return int(super()._load_properties(class_id, buf, offset))
        except Exception as exc:  # OverflowError, OSError (EOVERFLOW), ValueError, RecursionError
            self.properties: dict[str, Any] = {}
            self.undecodable = f"its AMQP properties do not decode: {type(exc).__name__}: {exc}"
            return offset


def _tolerate_undecodable_properties() -> None:
    """py-amqp builds every message it reads in ``method_framing`` (deliveries it reads itself,
    ``basic.get-ok``): there, it builds ``_TolerantMessage``s. Only a message that would have
    raised is read differently."""
    method_framing.Message = _TolerantMessage


# A delayed pass is one basic.get round trip per celery_delayed_* queue: made whenever the
# consumed queues have nothing for a take, and while they do, at most this often.
DELAYED_PASS_EVERY_S = 1.0
PREFETCH_MAX = 65535  # basic.qos counts in an unsigned short


class AmqpSource:
    kind = "amqp"

    def __init__(
        self, url: str, app: AppInfo, queues: list[str] | None, *, prefetch: int = 500
    ) -> None:
        self.app = app
        _tolerate_undecodable_properties()
        self.connection = Connection(url, transport_options=app.transport_options)
        self.connection.connect()
        self.raw: amqp.Connection = self.connection.connection
        self.channel = self._channel()
        self.queues = [
            q for q in (queues if queues is not None else list(app.queues)) if self._exists(q)
        ]
        self.delayed = [q for q in DELAYED_QUEUES if self._exists(q)]
        self.prefetch = max(1, min(PREFETCH_MAX, prefetch))
        self._buffer: deque[Taken] = deque()
        self._consuming = False
        self._consumers: dict[str, str] = {}  # consumer tag -> its queue
        self._reader: DeliveryReader | None = None
        self._next_pass = 0.0  # monotonic time of the next delayed pass while deliveries flow
        self._acked_upto = 0  # every delivery tag up to this one is acked or returned
        self._acknowledged: set[int] = set()  # tags above it already acked or returned

    def _channel(self) -> Any:
        channel = self.raw.channel()
        channel.auto_decode = False  # bodies stay bytes: decoding.py reads them
        return channel

    def _exists(self, queue: str) -> bool:
        probe = self.raw.channel()
        try:
            probe.queue_declare(queue, passive=True)
        except amqp.exceptions.NotFound:
            return False
        probe.close()
        return True

    def _on_message(self, queue: str) -> Any:
        def on_message(msg: Any) -> None:
            self._buffer.append(_taken(msg, queue))

        return on_message

    def _delivered(
        self,
        consumer: str,
        tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        properties: dict[str, Any],
        body: bytes,
        problem: str | None,
        size: int,
    ) -> bool:
        """A delivery the frame reader cut out; False for a consumer tag that is not ours."""
        queue = self._consumers.get(consumer)
        if queue is None:
            return False
        info = {"exchange": exchange, "routing_key": routing_key, "redelivered": redelivered}
        self._buffer.append(_delivery(queue, body, _meta(properties, info), tag, problem, size))
        return True

    def _consume(self) -> None:
        if self._consuming:
            return
        self.channel.basic_qos(0, self.prefetch, False)
        for queue in self.queues:
            tag = self.channel.basic_consume(queue, callback=self._on_message(queue), no_ack=False)
            self._consumers[str(tag)] = queue
        if DeliveryReader.usable(self.raw):  # else py-amqp reads every frame, as before
            self._reader = DeliveryReader(self.raw, self.channel.channel_id, self._delivered)
        self._consuming = True

    def recover(self, n: int) -> list[Taken]:
        """Nothing to do: RabbitMQ requeued whatever a dead drainer held."""
        return []

    def _pump(self, n: int, timeout: float) -> None:
        while len(self._buffer) < n:
            try:
                if self._reader is not None:
                    self._reader.read(timeout)
                else:
                    self.raw.drain_events(timeout=timeout)
            except TimeoutError:
                return
            timeout = min(timeout, 0.01)  # more may be in flight: read on briefly

    def take(self, n: int) -> list[Taken]:
        self._consume()
        self._pump(n, 0.05)
        out = [self._buffer.popleft() for _ in range(min(n, len(self._buffer)))]
        if len(out) < n and self.delayed and (not out or time.monotonic() >= self._next_pass):
            out.extend(self._delayed_pass(n - len(out)))
            self._next_pass = time.monotonic() + DELAYED_PASS_EVERY_S
        return out

    def destination(self, routing_key: str) -> str:
        return self.app.queue_for_routing_key(_DELAY_PREFIX.sub("", routing_key))

    def _delayed_pass(self, n: int) -> list[Taken]:
        out: list[Taken] = []
        foreign: list[int] = []
        wanted = set(self.queues)
        for delayed in self.delayed:
            while len(out) < n:
                msg = self.channel.basic_get(delayed, no_ack=False)
                if msg is None:
                    break
                queue = self.destination(str((msg.delivery_info or {}).get("routing_key") or ""))
                if queue in wanted:
                    out.append(_taken(msg, queue))
                else:
                    foreign.append(msg.delivery_tag)
        for tag in foreign:  # another queue's delayed message: back, untouched (seen once per pass)
            self.channel.basic_reject(tag, requeue=True)
        self._mark_acknowledged(foreign)
        return out

    def acknowledge(self, items: list[Taken]) -> None:
        """Ack a committed batch: one ``multiple`` ack when it is every delivery up to its last
        tag (the usual case), else one ack per delivery, so a delivery not yet committed (still
        in the prefetch buffer) is never acked along."""
        tags = sorted(int(t.token) for t in items)
        if not tags:
            return
        top = tags[-1]
        gaps = set(range(self._acked_upto + 1, top + 1)) - set(tags) - self._acknowledged
        if not gaps:
            self.channel.basic_ack(top, multiple=True)
            self._acked_upto = top
            self._acknowledged = {t for t in self._acknowledged if t > top}
            return
        for tag in tags:
            self.channel.basic_ack(tag)
        self._mark_acknowledged(tags)

    def _mark_acknowledged(self, tags: list[int]) -> None:
        self._acknowledged.update(tags)
        while self._acked_upto + 1 in self._acknowledged:
            self._acked_upto += 1
            self._acknowledged.discard(self._acked_upto)

    def remaining(self) -> int:
        total = 0
        for queue in self.queues:
            total += int(self.channel.queue_declare(queue, passive=True).message_count)
        return total + len(self._buffer)

    def idle(self, timeout: float) -> None:
        """Wait for deliveries (they wake this at once), at most ``timeout`` seconds."""
        if self._consuming:
            self._pump(1, timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError, amqp.exceptions.AMQPError):
            self.connection.release()

    # -- dry run ------------------------------------------------------------------------------

    # ``--dry-run`` counts, it does not read: RabbitMQ marks every message it hands out as
    # redelivered once it is given back (basic.get unacked, then a reject or a closed channel),
    # and a quorum queue also bumps its ``x-delivery-count`` (toward its delivery limit). The
    # tasks a reading dry run touched would all see ``delivery_info['redelivered'] = True``.
    dry_run_reads = False

    def counts(self) -> dict[str, int]:
        """Ready messages per queue, then per ``celery_delayed_*`` queue that holds any (their
        destinations are in routing keys, unread), by passive ``queue.declare``: nothing is
        read, nothing changes. Messages a consumer holds unacked are not counted."""
        out = {
            q: int(self.channel.queue_declare(q, passive=True).message_count) for q in self.queues
        }
        for delayed in self.delayed:
            held = int(self.channel.queue_declare(delayed, passive=True).message_count)
            if held:
                out[delayed] = held
        return out

    def peek(self) -> Iterator[Taken]:
        """Nothing: a read would mark what it read redelivered (see ``counts``)."""
        return iter(())

    def read_and_return(self) -> Iterator[Taken]:
        """Every ready message, read with ``basic_get`` unacked and returned when the channel
        closes: the content is unchanged, but RabbitMQ marks each one redelivered. For tests
        that compare py-amqp's reading with the drain's frame reader; ``--dry-run`` never reads."""
        channel = self._channel()
        try:
            for queue in self.queues:
                while (msg := channel.basic_get(queue, no_ack=False)) is not None:
                    yield _taken(msg, queue)
        finally:
            channel.close()  # every delivery goes back to its queue
