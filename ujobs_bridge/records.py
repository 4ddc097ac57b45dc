"""Plain records the driver hands back: what a job row looks like to the rest of the engine.

Why it exists: the worker, the CLI and tests speak in these frozen dataclasses, never in driver
rows, so the SQL can change shape without every caller changing with it.

What it is not: an ORM. Nothing here talks to the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID


class JobState(StrEnum):
    READY = "ready"
    RUNNING = "running"
    SLEEPING = "sleeping"
    WAITING = "waiting"
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"


LIVE_STATES = frozenset({JobState.READY, JobState.RUNNING, JobState.SLEEPING, JobState.WAITING})
TERMINAL_STATES = frozenset({JobState.DONE, JobState.DEAD, JobState.CANCELLED})


@dataclass(frozen=True, slots=True)
class JobRef:
    """What enqueue returns: the job's id, and whether an existing live job answered for the
    idempotency key instead of a new row."""

    id: UUID
    name: str
    existing: bool = False


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """One row a worker holds a lease on. ``deliveries`` counts every claim of the row, this
    one included (never given back, unlike ``attempt``): above 1, this claim is a redelivery.
    ``undecodable``: the stored input could not be decoded (nested past the recursion limit):
    the worker fails this row alone, with the reason, without running it.
    ``traceparent`` is the enqueuer's W3C trace context; ``due_at`` the ``run_at`` it was
    claimed at (pick-up latency is the claim's time minus it). ``started``: the claim recorded
    that its body starts at once (a free slot takes it); a row claimed ahead of a free slot (the
    prefetch) has its start recorded when a slot takes it, so a worker that dies is charged an
    attempt only for the bodies it started."""

    id: UUID
    name: str
    queue: str
    input: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_token: UUID
    expired: bool
    deliveries: int = 1
    traceparent: str | None = None
    due_at: datetime | None = None
    undecodable: str | None = None  # why ``input`` could not be decoded (it is then empty)
    started: bool = False  # the claim recorded its start: a free body slot takes it at once


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A whole job row, for introspection."""

    id: UUID
    name: str
    queue: str
    input: Any
    output: Any
    idempotency_key: str | None
    attempt: int
    max_attempts: int
    state: JobState
    priority: int
    run_at: datetime
    lease_expires_at: datetime | None
    claimed_by: str | None
    expires_at: datetime | None
    last_error: str | None
    tenant_id: str | None
    traceparent: str | None
    enqueued_by: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    failure_kind: str | None = None  # a dead job's kind of failure (``Fail``); None: dead letter

    @property
    def shown_state(self) -> str:
        """The state every view shows: a dead job's failure kind where its package gave one
        (an upper package's own word), else the engine's state (``dead``: a dead letter)."""
        if self.state is JobState.DEAD and self.failure_kind:
            return self.failure_kind
        return self.state.value

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self.__slots__:
            value = getattr(self, key)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, UUID):
                value = str(value)
            out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class QueueStat:
    queue: str
    state: JobState
    jobs: int
    oldest_run_at: datetime | None
    failure_kind: str | None = None  # dead jobs of a package's failure kind (``Fail``)

    @property
    def shown_state(self) -> str:
        """The state as the views show it (a dead job's failure kind where it has one)."""
        return self.failure_kind if self.failure_kind else self.state.value


@dataclass(frozen=True, slots=True)
class Settlement:
    """How one attempt ended, as the worker reports it to the driver in a batch.

    ``state`` is where the row goes: done, ready (retry after ``delay_s``), dead or cancelled.
    ``uncount`` is 1 for an attempt handed back by a drain: it gives the claim's attempt back.
    ``outage``: handed back because the body met a database outage; the database gives such
    attempts back only ``db.leases.OUTAGE_HANDBACKS`` times per job, then counts them.
    """

    id: UUID
    token: UUID
    state: JobState
    output_json: str | None = None
    delay_s: float = 0.0
    error: str | None = None
    uncount: int = 0
    run_at: datetime | None = None  # a suspended job's wake time
    outage: bool = False  # handed back for a database outage (capped: migration 0015)
    failure_kind: str | None = None  # a dead job's kind of failure (``Fail``); None: dead letter
