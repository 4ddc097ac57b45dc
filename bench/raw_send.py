"""The ceiling of a Celery send into Postgres: Celery's own ``.delay()``, its message one raw INSERT.

Why it exists: the Celery-shaped ``.delay()`` cell compares celery_compat's send with Celery's
on Redis. Part of either is Celery itself (``apply_async``, routing, ``as_task_v2``: the message's
headers and body, the producer pool), which any send that keeps Celery's messages exact pays;
the rest is where the message goes. Here a plain Celery app (no broker server: kombu's
``memory://`` transport lends the producer Celery acquires and never publishes on it) sends
through Celery's whole path, and its last step, ``send_task_message``, writes the message as
ONE ``INSERT`` of a JSON document into the raw table, on one autocommit connection: each
``.delay()`` returns after its row committed, the flushed commit or ``synchronous_commit=off``.
No queue logic, no leases, no signals, no retry: what a Celery send to Postgres costs at the
least, so the cell's ratios say how much of a gap to Celery on Redis any such send must have.

What it is not: a usable Celery transport, or a part of the bridge (``celery_compat.sending``).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from celery import Celery
from celery.app.amqp import AMQP

from . import pg

INSERT_MESSAGE = "insert into raw_jobs (queue, payload) values (%s, %s::jsonb)"


class RawInsertAMQP(AMQP):  # type: ignore[misc]
    """Celery's AMQP helper whose send step is one INSERT on ``connection``."""

    connection: psycopg.Connection[Any] | None = None

    def _create_task_sender(self) -> Any:
        amqp = self

        def send_task_message(
            producer: Any,
            name: str,
            message: Any,
            queue: Any = None,
            routing_key: str | None = None,
            **options: Any,
        ) -> None:
            headers, properties, body, _sent_event = message
            args, kwargs, embed = body
            document = json.dumps(
                {
                    "headers": headers,
                    "args": args,
                    "kwargs": kwargs,
                    "embed": embed,
                    "properties": properties,
                }
            )
            assert amqp.connection is not None, "RawSend.open() first"
            qname = getattr(queue, "name", queue) or routing_key or "celery"
            amqp.connection.execute(INSERT_MESSAGE, (str(qname), document))

        return send_task_message


class RawSend:
    """A Celery app with a no-op task whose ``.delay()`` inserts into the raw table of ``dsn``."""

    def __init__(self, dsn: str, queue: str) -> None:
        self.dsn = dsn
        self.app = Celery("ujb_bench_raw", broker="memory://", set_as_current=False)
        self.app.amqp_cls = RawInsertAMQP
        self.app.conf.update(task_ignore_result=True, task_default_queue=queue)

        @self.app.task(name="ujb_bench_raw.noop", shared=False)  # type: ignore[untyped-decorator]
        def noop() -> None:
            return None

        self.noop = noop
        self._conn: psycopg.Connection[Any] | None = None

    def open(self, *, synchronous_commit: str = "on") -> None:
        """One autocommit connection for every send, committing with ``synchronous_commit``."""
        self.close()
        self._conn = pg.connect(self.dsn)
        self._conn.execute(
            "select set_config('synchronous_commit', %s, false)", (synchronous_commit,)
        )
        self.app.amqp.connection = self._conn

    def send(self, count: int) -> None:
        for _ in range(count):
            self.noop.delay()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if "amqp" in self.app.__dict__:
            self.app.amqp.connection = None
        self.app.close()
