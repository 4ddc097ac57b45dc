"""``perform(job.call(...))``: run ONE attempt of a job through the real attempt core.

Why it exists: a unit test of a job wants to know what one attempt does to the row (done with this
output, retry scheduled with this error, snoozed, suspended on a step) without starting a worker
and waiting for it. ``perform`` inserts the job with the real insert, claims it the way a worker
does (lease taken, attempt counted), runs the body with its ``current_job()`` context and durable
steps bound, writes the outcome with the real fenced settle, and returns what happened. Time is
injected: pass ``clock=FrozenClock()`` (or use a client made with one) to pin Python and SQL.

What it is not: a worker. It runs the job now, whatever its delay, queue or priority; it does not
enforce ``timeout=``, heartbeat the lease, rescue or expire other jobs. Run the next attempt with
``perform_again(performed, my_job, client=client)``, or use ``run_until_idle`` with a ``Worker``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ujobs_bridge._internal.clock import Clock
from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db import job_reads as reads_db
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db import testing as testing_db
from ujobs_bridge._internal.db.steps import Lease
from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.worker import attempt as attempt_core
from ujobs_bridge._internal.worker.claims import EXPIRE_ERROR
from ujobs_bridge._internal.worker.config import DEFAULT_LEASE_S
from ujobs_bridge.client import Client
from ujobs_bridge.errors import JobNotFoundError, JobStateError
from ujobs_bridge.job import EnqueueRequest, JobDefinition
from ujobs_bridge.records import ClaimedJob, JobRecord, JobState, Settlement
from ujobs_bridge.steps import StepRunner

WORKER_ID = "ujobs:testing:perform"


@dataclass(frozen=True, slots=True)
class Performed:
    """What one attempt did: the row's ``state``, ``output`` and ``error`` after it, the whole
    row (``job``), and the ``settlement`` the attempt core decided (``None``: nothing written)."""

    state: JobState
    output: Any
    error: str | None
    attempt: int
    job: JobRecord
    settlement: Settlement | None

    @property
    def id(self) -> UUID:
        return self.job.id


def perform(
    request: EnqueueRequest,
    *,
    client: Client,
    clock: Clock | None = None,
) -> Performed:
    """Insert ``request`` (``my_job.call(...)``), run one attempt of it, and report the row."""
    spec = request.spec()
    with client.pool.connection() as conn:
        ref = enqueue_db.job_enqueue(conn, spec, (clock or client.clock).sql_now())
    return perform_again(ref.id, request.definition, client=client, clock=clock)


def perform_again(
    job: UUID | Performed,
    definition: JobDefinition[Any, Any],
    *,
    client: Client,
    clock: Clock | None = None,
) -> Performed:
    """Run the next attempt of a job already in the table (a retry, a snoozed or woken job)."""
    job_id = job.id if isinstance(job, Performed) else job
    clock = clock or client.clock
    with client.pool.connection() as conn:
        claimed = testing_db.job_claim_by_id(
            conn,
            testing_db.ClaimById(
                id=job_id,
                token=uuid.uuid4(),
                lease_s=DEFAULT_LEASE_S,
                worker=WORKER_ID,
                now=clock.sql_now(),
            ),
        )
        if claimed is None:
            record = reads_db.job_get(conn, job_id)
            if record is None:
                raise JobNotFoundError(f"job {job_id} does not exist")
            raise JobStateError(
                f"job {job_id} is {record.state.value}: there is no attempt to run",
                hint="perform runs a job that is ready, sleeping or waiting",
            )
    signal = AttemptSignal()
    if claimed.expired:
        settlement: Settlement | None = Settlement(
            claimed.id, claimed.lease_token, state=JobState.CANCELLED, error=EXPIRE_ERROR
        )
    else:
        runner = StepRunner(
            lease=Lease(claimed.id, claimed.lease_token, claimed.attempt),
            connection=client.pool.connection,
            signal=signal,
            clock=clock,
        )
        settlement = run_attempt(definition, claimed, signal, runner)
    with client.pool.connection() as conn:
        if settlement is not None:
            leases_db.job_settle(conn, [settlement], clock.sql_now())
        record = reads_db.job_get(conn, job_id)
    assert record is not None, f"job {job_id} vanished during its attempt"
    return Performed(
        state=record.state,
        output=record.output,
        error=record.last_error,
        attempt=record.attempt,
        job=record,
        settlement=settlement,
    )


def run_attempt(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner,
) -> Settlement | None:
    """The one call into the worker's attempt core: run the body, decide the settlement."""
    return attempt_core.perform(definition, claimed, signal, runner)
