"""The caller's side of remote control: send a command to live workers, collect their replies.

Why it exists: every tool that asks or steers workers (the engine's commands, and the command
sets of upper packages: celery_compat maps ``app.control`` and ``celery inspect|control|status``
onto this) needs the same exchange: write a request row (its NOTIFY wakes the addressed
workers), then wait for reply rows, woken by their NOTIFY on the caller's own connection.
``reply=False`` does not wait, ``limit`` stops after that many replies, ``destination`` (node
names) sets the limit to its length when none is given, and ``timeout`` is how long to wait for
the next reply. The wait also ends once every live node addressed has answered, and at once
when no live node is addressed: ``ping`` with no worker running is ``[]`` immediately. A
command of a set (``command_set``: ``<set>.<command>``, ``control.CommandSet``) is awaited only
from the live nodes whose row says they have that set; others do not answer it. Behind
PgBouncer (``connections.behind_pgbouncer``) the caller's connection cannot LISTEN: the replies
are read every half second instead.

What it is not: what workers do with a command (``ujobs_bridge._internal.worker.control``) or
any reply's shape (an upper package reads its own set's replies).
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


def has_set(node: nodes.NodeRecord, command_set: str | None) -> bool:
    """Does ``node`` answer the commands of ``command_set`` (None: the engine's, every node)?"""
    if command_set is None:
        return True
    sets = node.info.get("command_sets")
    return isinstance(sets, list) and command_set in sets


def addressed(
    live: Sequence[nodes.NodeRecord],
    destination: Sequence[str] | None,
    command_set: str | None = None,
) -> list[str]:
    """The worker ids of the live nodes a request to ``destination`` reaches and answers."""
    wanted = None if destination is None else set(destination)
    return [
        n.worker_id
        for n in live
        if (wanted is None or n.name in wanted) and has_set(n, command_set)
    ]


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
    command_set: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> list[Reply]:
    """Send ``command`` to the live nodes named by ``destination`` (None: all) on ``conn`` (an
    autocommit connection, used by this call alone); with ``reply``, wait for their replies as
    described above and return them in arrival order. ``command_set``: the set ``command``
    belongs to (``"<set>.<name>"``); only nodes that have it are awaited."""
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
        live = nodes.nodes_live(conn, clock.sql_now())
        expected = set(addressed(live, destination, command_set))
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
            deadline = time.monotonic() + timeout  # the timeout is per reply
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
