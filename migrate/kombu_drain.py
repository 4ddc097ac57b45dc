"""Drain any other kombu transport (SQS, filesystem, in-memory, …) with the same contract:
take with ``no_ack=False``, insert + COMMIT, then ack.

Why it exists: Redis and RabbitMQ have dedicated drainers because their crash windows need
broker-specific care; every other transport goes through kombu's generic ``basic_get`` and
``ack``. Whether a message survives a drainer killed between commit and ack is then the
transport's own property: SQS keeps it (the visibility timeout returns it), while kombu's
virtual transports without a server-side unacked store (filesystem, memory) hold unacked
messages only in the process, restoring them on a clean close but not after SIGKILL. The CLI
says so when it starts on such a transport.

What it is not: a kombu consumer (``Message.decode()`` is never called; bodies go to
``decoding.py`` raw).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kombu.connection import Connection as _Connection
from kombu.entity import Queue as _Queue

from migrate.appinfo import AppInfo
from migrate.batch import Taken, envelope_of
from migrate.quarantine import json_safe

# Transports whose unacked messages survive the drainer's death (the broker keeps them).
Connection: Any = _Connection  # kombu is untyped here
Queue: Any = _Queue
CRASH_SAFE = frozenset({"sqs", "azureservicebus", "gcpubsub"})


def _taken(message: Any, queue: str) -> Taken:
    body = message.body
    raw = bytes(body) if isinstance(body, bytes | bytearray) else str(body or "").encode("utf-8")
    properties = {k: v for k, v in dict(message.properties or {}).items() if k != "body_encoding"}
    headers = dict(message.headers or {})
    meta = json_safe(
        {
            "content_type": message.content_type or "application/data",
            "content_encoding": message.content_encoding or "utf-8",
            "headers": headers,
            "properties": properties,
        }
    )
    # The envelope holds the headers as received (as the Redis drain's do): the metadata kept
    # for the quarantine is cut short where it nests deep (json_safe), and a row must never be
    # made of a cut header. The properties stay as json_safe made them (transport objects).
    envelope = envelope_of("kombu", raw, meta, 0)
    envelope.headers = headers
    return Taken(raw, "kombu", queue, envelope, meta, message)


class KombuSource:
    kind = "kombu"

    def __init__(self, url: str, app: AppInfo, queues: list[str] | None) -> None:
        self.app = app
        self.connection = Connection(url, transport_options=app.transport_options)
        self.transport = str(self.connection.transport_cls)
        self.crash_safe = self.connection.transport.driver_type in CRASH_SAFE
        self.channel = self.connection.channel()
        self.queues = list(queues) if queues is not None else list(app.queues)
        self._turn = 0

    def _get(self, channel: Any, queue: str) -> Any:
        return Queue(queue, channel=channel).get(no_ack=False)

    def recover(self, n: int) -> list[Taken]:
        return []  # the transport returns what a dead drainer held, if it can (see module doc)

    def take(self, n: int) -> list[Taken]:
        out: list[Taken] = []
        count = len(self.queues)
        for i in range(count):
            queue = self.queues[(self._turn + i) % count]
            while len(out) < n:
                message = self._get(self.channel, queue)
                if message is None:
                    break
                out.append(_taken(message, queue))
            if len(out) >= n:
                break
        self._turn += 1
        return out

    def acknowledge(self, items: list[Taken]) -> None:
        for t in items:
            t.token.ack()

    def remaining(self) -> int | None:
        total = 0
        for queue in self.queues:
            try:
                total += int(self.channel.queue_declare(queue=queue, passive=True).message_count)
            except Exception:  # a transport that cannot count: the bar shows "?"
                return None
        return total

    def idle(self, timeout: float) -> None:
        """Nothing to take: the runner waits."""

    def close(self) -> None:
        self.connection.release()

    def peek(self) -> Iterator[Taken]:
        """Every message, taken unacked and restored when the channel closes."""
        channel = self.connection.channel()
        try:
            for queue in self.queues:
                while (message := self._get(channel, queue)) is not None:
                    yield _taken(message, queue)
        finally:
            channel.close()  # virtual transports restore unacked messages on close
