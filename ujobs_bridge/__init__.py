"""ujobs-bridge: durable jobs in Postgres, and the road off Celery.

The public surface of the engine lives here and only here::

    from ujobs_bridge import job, connect, current_job

Submodules are implementation; import from the package root.
"""

from __future__ import annotations

from .client import Client, connect, default_client, set_default_client
from .clock import Clock, FrozenClock, SystemClock
from .context import JobContext, current_job
from .errors import (
    AttemptAborted,
    ConfigError,
    ErrorCode,
    EventTimeoutError,
    PayloadError,
    StepError,
    StepSuspended,
    UjobsError,
)
from .events import EventSent, send_event
from .job import EnqueueRequest, JobCall, JobDefinition, job
from .outbox.relay import OutboxRelay
from .outbox.staging import Staged, stage
from .outcomes import Cancel, Discard, Snooze
from .purge import PurgeTarget, purge, register_targets
from .records import JobRecord, JobRef, JobState
from .retry import RetryPolicy
from .scheduling.scheduler import Scheduler
from .scheduling.task import Occurrence, PeriodicTask, task
from .steps import step
from .worker.config import WorkerConfig
from .worker.loop import Worker

__all__ = [
    "AttemptAborted",
    "Cancel",
    "Client",
    "Clock",
    "ConfigError",
    "Discard",
    "EnqueueRequest",
    "ErrorCode",
    "EventSent",
    "EventTimeoutError",
    "FrozenClock",
    "JobCall",
    "JobContext",
    "JobDefinition",
    "JobRecord",
    "JobRef",
    "JobState",
    "Occurrence",
    "OutboxRelay",
    "PayloadError",
    "PeriodicTask",
    "PurgeTarget",
    "RetryPolicy",
    "Scheduler",
    "Snooze",
    "Staged",
    "StepError",
    "StepSuspended",
    "SystemClock",
    "UjobsError",
    "Worker",
    "WorkerConfig",
    "connect",
    "current_job",
    "default_client",
    "job",
    "purge",
    "register_targets",
    "send_event",
    "set_default_client",
    "stage",
    "step",
    "task",
]
