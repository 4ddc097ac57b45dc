"""The child side of ``--pool processes``: import the ``-A`` module once, run bodies by name.

Why it exists: CPU-bound bodies need processes, as Celery's prefork pool gives them. The child
resolves a job name through the registry it built from the operator's ``-A`` module — never by
importing a name taken from the row — and returns JSON text and a retry verdict, not objects,
so nothing is pickled from the database.

What it is not: a lease keeper. Leases, fencing and outcomes stay in the parent.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
from typing import Any

from . import payload
from .job import JobDefinition

_registry: dict[str, JobDefinition[Any, Any]] = {}


def child_init(app_spec: str | None) -> None:
    from . import registry

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if app_spec is not None:
        _registry.update(registry.load(app_spec))


def child_run(name: str, job_input: Any) -> tuple[str | None, str | None, bool]:
    """Returns (output_json, error_text, retryable)."""
    from .attempt import error_text

    definition = _registry[name]
    try:
        args, kwargs = payload.decode_input(job_input)
        value = definition.fn(*args, **kwargs)
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
        return payload.dumps(value, what=f"the result of job {name!r}"), None, False
    except Exception as exc:
        return None, error_text(exc), definition.retry.retries(exc)
