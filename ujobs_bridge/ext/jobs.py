"""Jobs as an upper package declares and runs them: definitions, what a running body sees,
explicit outcomes (``Fail``: a terminal failure in the package's own word), retry policies, job ids, name validation, the limit on a result's size,
``work_starts`` (a body with a prologue of its own, declared ``work_starts_late``, says when its
real work starts: a worker that dies before that is not charged for it), the one range of
instants a row may hold (``storable_instant``: what the Celery sender and ``migrate`` check
``eta``/``expires`` against) and the send commit a user chooses
(``send_commit``: its values, their check, the level a send's own statement sets, the refusal
on a caller's transaction).

What it is not: the user's ``@job`` decorator (``ujobs_bridge.job``, re-exported at the root).
"""

from __future__ import annotations

from ujobs_bridge._internal.ids import new_job_id, new_job_ids
from ujobs_bridge._internal.jobs import send_commit
from ujobs_bridge._internal.jobs.context import (
    AttemptSignal,
    JobContext,
    current_job,
    node_name,
    work_starts,
)
from ujobs_bridge._internal.jobs.instants import (
    EARLIEST_INSTANT,
    LATEST_INSTANT,
    RANGE_TEXT,
    instant_after,
    storable_instant,
)
from ujobs_bridge._internal.jobs.outcomes import Cancel, Discard, Fail, Snooze
from ujobs_bridge._internal.jobs.payload import (
    DEFAULT_MAX_RESULT_BYTES,
    result_size,
    result_too_large,
)
from ujobs_bridge._internal.jobs.retry import RetryPolicy
from ujobs_bridge._internal.jobs.validation import queue_name
from ujobs_bridge.job import EnqueueRequest, JobDefinition

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "EARLIEST_INSTANT",
    "LATEST_INSTANT",
    "RANGE_TEXT",
    "AttemptSignal",
    "Cancel",
    "Discard",
    "EnqueueRequest",
    "Fail",
    "JobContext",
    "JobDefinition",
    "RetryPolicy",
    "Snooze",
    "current_job",
    "instant_after",
    "new_job_id",
    "new_job_ids",
    "node_name",
    "queue_name",
    "result_size",
    "result_too_large",
    "send_commit",
    "storable_instant",
    "work_starts",
]
