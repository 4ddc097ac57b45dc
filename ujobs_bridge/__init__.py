"""ujobs-bridge: durable jobs in Postgres, and the road off Celery.

The public surface of the engine lives here and only here::

    from ujobs_bridge import job, connect, current_job

Submodules are implementation; import from the package root.

A name is imported when it is first asked for (PEP 562 ``__getattr__``), not with the package:
every ``import ujobs_bridge.<submodule>`` runs this file first, and a command that needs only a
few submodules (``ujobs-bridge migrate``: its start-up is part of every drain) should not import
the client, the worker and the scheduler. What ``job.py`` defines is bound at once: ``job`` is
also a submodule name, and importing that submodule would replace a lazily bound function with
the module. The retention job (``purge``, ``PurgeTarget``, ``register_targets``) is bound at once
too. Everything else lives in ``ujobs_bridge._internal``; the packages built on the engine use
``ujobs_bridge.ext``. ``__version__`` is the installed package's version (``pyproject.toml``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ujobs_bridge._internal.jobs.purge import PurgeTarget, purge, register_targets
from ujobs_bridge.job import EnqueueRequest, JobCall, JobDefinition, job

if TYPE_CHECKING:
    from ujobs_bridge._internal.clock import Clock, FrozenClock, SystemClock
    from ujobs_bridge._internal.jobs.context import JobContext, current_job
    from ujobs_bridge._internal.jobs.events import EventSent, send_event
    from ujobs_bridge._internal.jobs.outcomes import Cancel, Discard, Snooze
    from ujobs_bridge._internal.jobs.retry import RetryPolicy
    from ujobs_bridge._internal.outbox.relay import OutboxRelay
    from ujobs_bridge._internal.outbox.staging import Staged, stage
    from ujobs_bridge._internal.scheduling.scheduler import Scheduler
    from ujobs_bridge._internal.scheduling.task import Occurrence, PeriodicTask, task
    from ujobs_bridge._internal.worker.config import WorkerConfig
    from ujobs_bridge._internal.worker.loop import Worker
    from ujobs_bridge.client import Client, connect, default_client, set_default_client
    from ujobs_bridge.errors import (
        AttemptAborted,
        ConfigError,
        ErrorCode,
        EventTimeoutError,
        PayloadError,
        StepError,
        StepSuspended,
        UjobsError,
    )
    from ujobs_bridge.records import JobRecord, JobRef, JobState
    from ujobs_bridge.steps import step


# import cost: each submodule is imported when one of its names is first asked for (PEP 562)
def _module(home: str) -> Any:
    """The submodule ``home``: static imports, so no module is ever named by data."""
    if home == "client":
        from ujobs_bridge import client

        return client
    if home == "clock":
        from ujobs_bridge._internal import clock

        return clock
    if home == "context":
        from ujobs_bridge._internal.jobs import context

        return context
    if home == "errors":
        from ujobs_bridge import errors

        return errors
    if home == "events":
        from ujobs_bridge._internal.jobs import events

        return events
    if home == "outcomes":
        from ujobs_bridge._internal.jobs import outcomes

        return outcomes
    if home == "records":
        from ujobs_bridge import records

        return records
    if home == "retry":
        from ujobs_bridge._internal.jobs import retry

        return retry
    if home == "steps":
        from ujobs_bridge import steps

        return steps
    if home == "scheduler":
        from ujobs_bridge._internal.scheduling import scheduler

        return scheduler
    if home == "task":
        from ujobs_bridge._internal.scheduling import task

        return task
    if home == "worker_config":
        from ujobs_bridge._internal.worker import config

        return config
    if home == "worker_loop":
        from ujobs_bridge._internal.worker import loop

        return loop
    if home == "relay":
        from ujobs_bridge._internal.outbox import relay

        return relay
    if home == "staging":
        from ujobs_bridge._internal.outbox import staging

        return staging
    raise AssertionError(home)


# Each lazily bound name -> the submodule (relative to this package) that defines it.
_HOMES: dict[str, str] = {
    "Client": "client",
    "connect": "client",
    "default_client": "client",
    "set_default_client": "client",
    "Clock": "clock",
    "FrozenClock": "clock",
    "SystemClock": "clock",
    "JobContext": "context",
    "current_job": "context",
    "AttemptAborted": "errors",
    "ConfigError": "errors",
    "ErrorCode": "errors",
    "EventTimeoutError": "errors",
    "PayloadError": "errors",
    "StepError": "errors",
    "StepSuspended": "errors",
    "UjobsError": "errors",
    "EventSent": "events",
    "send_event": "events",
    "OutboxRelay": "relay",
    "Staged": "staging",
    "stage": "staging",
    "Cancel": "outcomes",
    "Discard": "outcomes",
    "Snooze": "outcomes",
    "JobRecord": "records",
    "JobRef": "records",
    "JobState": "records",
    "RetryPolicy": "retry",
    "Scheduler": "scheduler",
    "Occurrence": "task",
    "PeriodicTask": "task",
    "task": "task",
    "step": "steps",
    "WorkerConfig": "worker_config",
    "Worker": "worker_loop",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # single-sourced: pyproject.toml's version, from the metadata
        # import cost: the metadata is read only when the version is asked for
        from importlib.metadata import version

        return version("ujobs-bridge")
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_module(home), name)
    globals()[name] = value  # bound for good: the next look-up does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
