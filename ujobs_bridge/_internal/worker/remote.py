"""The caller's side of remote control: send a command to live workers, collect their replies.

Why it exists: ``app.control.inspect()``, ``app.control.broadcast`` and the ``celery inspect``
/ ``control`` / ``status`` commands (celery_compat) and any engine tool need the same exchange:
write a request row (its NOTIFY wakes the addressed workers), then wait for reply rows, woken by
their NOTIFY on the caller's own connection. As in Celery, ``reply=False`` does not wait,
``limit`` stops after that many replies, ``destination`` (node names) sets the limit to its
length when none is given, and ``timeout`` is how long to wait for the next reply. Unlike Celery
(which cannot know who is listening), the wait also ends once every live node addressed has
answered, and at once when no live node is addressed: ``ping`` with no worker running is ``[]``
immediately. Behind PgBouncer (``connections.behind_pgbouncer``) the caller's connection cannot
LISTEN: the replies are read every half second instead.

What it is not: what workers do with a command (``ujobs_bridge._internal.worker.control``) or Celery's
reply flattening (celery_compat's ``Inspect`` keeps Celery's own).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.db import mailbox, nodes
from ujobs_bridge._internal.db.connections import behind_pgbouncer
from ujobs_bridge.errors import ConfigError

MIN_REQUEST_TTL_S = 10.0  # a request waits this long at least for a worker that polls


@dataclass(frozen=True, slots=True)
class Reply:
    """One worker process's reply: its node name and the reply as JSON text."""

    node: str
    worker_id: str
    value_json: str


def addressed(live: Sequence[nodes.NodeRecord], destination: Sequence[str] | None) -> list[str]:
    """The worker ids of the live nodes a request to ``destination`` reaches."""
    wanted = None if destination is None else set(destination)
    return [n.worker_id for n in live if wanted is None or n.name in wanted]


def broadcast(
    conn: psycopg.Connection[Any],
    command: str,
    arguments_json: str = "{}",
    *,
    destination: Sequence[str] | None = None,
    reply: bool = False,
    timeout: float = 1.0,
    limit: int | None = None,
    on_reply: Callable[[Reply], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> list[Reply]:
    """Send ``command`` to the live nodes named by ``destination`` (None: all) on ``conn`` (an
    autocommit connection, used by this call alone); with ``reply``, wait for their replies as
    described above and return them in arrival order."""
    if destination is not None and isinstance(destination, str):
        raise ConfigError(
            f"destination must be a list of node names, not {destination!r}",
            hint=f"pass destination=[{destination!r}]",
        )
    if limit is None and destination:
        limit = len(destination)
    request = mailbox.ControlRequest(
        uuid.uuid4(), command, arguments_json, None if destination is None else destination, reply
    )
    ttl = max(float(timeout), MIN_REQUEST_TTL_S)
    if not reply:
        mailbox.control_send(conn, request, ttl, clock.sql_now())
        return []
    listens = not behind_pgbouncer()  # a pooled session is not ours to LISTEN on
    if listens:
        mailbox.listen_replies(conn, True)
    try:
        expected = set(addressed(nodes.nodes_live(conn, clock.sql_now()), destination))
        mailbox.control_send(conn, request, ttl, clock.sql_now())
        return _collect(conn, request.id, expected, timeout, limit, on_reply)
    finally:
        if listens and not conn.closed:
            mailbox.listen_replies(conn, False)


def _collect(
    conn: psycopg.Connection[Any],
    request_id: uuid.UUID,
    expected: set[str],
    timeout: float,
    limit: int | None,
    on_reply: Callable[[Reply], None] | None,
) -> list[Reply]:
    got: list[Reply] = []
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while expected - seen:
        for row in mailbox.control_replies(conn, request_id):
            if row.worker_id in seen:
                continue
            seen.add(row.worker_id)
            answer = Reply(row.node, row.worker_id, row.reply)
            got.append(answer)
            deadline = time.monotonic() + timeout  # as Celery: the timeout is per reply
            if on_reply is not None:
                on_reply(answer)
            if limit is not None and len(got) >= limit:
                return got
        left = deadline - time.monotonic()
        if left <= 0 or not expected - seen:
            break
        for _ in conn.notifies(timeout=min(left, 0.5), stop_after=1):
            pass
    return got
