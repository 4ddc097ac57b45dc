"""Jobs as an upper package declares and runs them: definitions, what a running body sees,
explicit outcomes, retry policies, job ids, name validation and the limit on a result's size.

What it is not: the user's ``@job`` decorator (``ujobs_bridge.job``, re-exported at the root).
"""

from __future__ import annotations

from ujobs_bridge._internal.ids import new_job_id, new_job_ids
from ujobs_bridge._internal.jobs.context import AttemptSignal, JobContext, current_job, node_name
from ujobs_bridge._internal.jobs.outcomes import Cancel, Discard, Snooze
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
    "AttemptSignal",
    "Cancel",
    "Discard",
    "EnqueueRequest",
    "JobContext",
    "JobDefinition",
    "RetryPolicy",
    "Snooze",
    "current_job",
    "new_job_id",
    "new_job_ids",
    "node_name",
    "queue_name",
    "result_size",
    "result_too_large",
]
