"""Refuse, at send time, a Celery queue name no bridge worker could consume.

Why it exists: Celery accepts any queue name (``apply_async(queue="my queue")``, a
``task_routes`` entry, a ``Queue`` object), but a bridge worker names its queues with ``-Q``,
whose names are the engine's (``ujobs_bridge._internal.jobs.validation.queue_name``: 1-48 characters from
``A-Z a-z 0-9 _ . : -``). A message sent to any other name would wait forever, so the send is
refused with the name and the two ways out, before anything touches the database (a refusal
inside ``enqueue_in(conn)`` leaves the caller's transaction usable).

What it is not: routing (Celery's router decides the name; ``sending.py`` resolves it) or a
check on tasks sent to the real broker (``ujobs_broker_tasks``: Celery workers consume those).
"""

from __future__ import annotations

from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.ext.jobs import queue_name

_KNOWN_GOOD: set[str] = set()  # names already checked: a send pays a set lookup


def bridge_queue(name: str, task: str) -> str:
    """``name`` if a bridge worker can consume it, else ``UJ_QUEUE_NAME_INVALID``."""
    if name in _KNOWN_GOOD:
        return name
    try:
        queue_name(name)
    except ConfigError:
        raise ConfigError(
            f"task {task!r} is routed to the queue {name!r}, which no bridge worker can consume",
            hint="name the queue with 1-48 characters from A-Z a-z 0-9 _ . : - (in queue=, "
            "task_routes or task_default_queue), or list the task in ujobs_broker_tasks to keep "
            "sending it to the Celery broker",
            code=ErrorCode.QUEUE_NAME_INVALID,
        ) from None
    if len(_KNOWN_GOOD) < 10_000:
        _KNOWN_GOOD.add(name)
    return name
