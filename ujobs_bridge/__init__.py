"""ujobs-bridge: durable jobs in Postgres, and the road off Celery.

The public surface of the engine lives here and only here::

    from ujobs_bridge import job, connect, current_job

Submodules are implementation; import from the package root.
"""

from __future__ import annotations

from .client import Client, connect, default_client, set_default_client
from .clock import Clock, FrozenClock, SystemClock
from .context import JobContext, current_job
from .errors import AttemptAborted, ConfigError, ErrorCode, PayloadError, UjobsError
from .job import EnqueueRequest, JobCall, JobDefinition, job
from .records import JobRecord, JobRef, JobState
from .retry import RetryPolicy
from .worker import Worker
from .worker_config import WorkerConfig

__all__ = [
    "AttemptAborted",
    "Client",
    "Clock",
    "ConfigError",
    "EnqueueRequest",
    "ErrorCode",
    "FrozenClock",
    "JobCall",
    "JobContext",
    "JobDefinition",
    "JobRecord",
    "JobRef",
    "JobState",
    "PayloadError",
    "RetryPolicy",
    "SystemClock",
    "UjobsError",
    "Worker",
    "WorkerConfig",
    "connect",
    "current_job",
    "default_client",
    "job",
    "set_default_client",
]
