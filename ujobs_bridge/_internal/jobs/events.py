"""``send_event``: deliver an event to the job waiting for it (``step.wait_for_event``).

Why it exists: a job that waits for an outside fact (a webhook, a human approval) must not hold
a worker while it waits, and the fact must not be lost if it arrives BEFORE the job starts
waiting. Events are stored, kept for a retention window (7 days by default, the
``event_retention_s`` a ``StepRunner`` is given), consumed at most once, and sending one wakes
every job waiting on that (event, key) at once.

What it is not: a pub/sub bus. One event is consumed by one waiting step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from ujobs_bridge._internal.db import steps as store
from ujobs_bridge._internal.jobs.payload import dumps
from ujobs_bridge._internal.jobs.validation import NAME_PATTERN
from ujobs_bridge.client import Client, default_client
from ujobs_bridge.errors import ConfigError


@dataclass(frozen=True, slots=True)
class EventSent:
    id: int
    woken: int  # jobs that were waiting for it and are now due


def send_event(
    event: str,
    key: str,
    payload: Any = None,
    *,
    client: Client | None = None,
    conn: psycopg.Connection[Any] | None = None,
) -> EventSent:
    """Store ``event`` for ``key`` and wake its waiters. With ``conn=`` it joins the caller's
    transaction (the event exists only if that transaction commits)."""
    if not isinstance(event, str) or not NAME_PATTERN.match(event):
        raise ConfigError(
            f"event name {event!r} is not allowed",
            hint="use 1-48 characters from A-Z a-z 0-9 _ . : -",
        )
    if not isinstance(key, str) or not key or len(key) > 512:
        raise ConfigError(
            f"event key {key!r} is not allowed",
            hint="pass a non-empty string of at most 512 characters",
        )
    body = dumps(payload, what=f"the payload of event {event!r}")
    if conn is not None:
        event_id, woken = store.event_send(conn, event, key, body, None)
        return EventSent(event_id, woken)
    active = client or default_client()
    with active.pool.connection() as pooled:
        event_id, woken = store.event_send(pooled, event, key, body, active.clock.sql_now())
    return EventSent(event_id, woken)
