"""The child side of ``--pool processes``: import the ``-A`` module once, run bodies by name.

Why it exists: CPU-bound bodies need processes, as Celery's prefork pool gives them. The child
resolves a job name through the registry it built from the operator's ``-A`` module — never by
importing a name taken from the row — and answers with plain tuples (JSON text, error text, a
suspension's wake time), not pickled objects, so nothing from the database is unpickled. Durable
steps work in the child too: it writes them under the attempt's lease token on its own pool.

What it is not: a lease keeper. Leases, fencing and outcomes stay in the parent, and a cancel
cannot interrupt a child's body (it is fenced when it returns).
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import threading
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from .. import payload
from ..clock import SYSTEM_CLOCK
from ..context import AttemptSignal
from ..db.steps import Lease
from ..errors import StepError, StepSuspended
from ..job import JobDefinition
from ..outcomes import Cancel, Discard, Outcome, Snooze
from ..records import ClaimedJob
from .attempt import BodyResult, RemoteJobError, error_text

_registry: dict[str, JobDefinition[Any, Any]] = {}
_dsn: list[str] = []
_pool: list[ConnectionPool[psycopg.Connection[Any]]] = []
_lock = threading.Lock()

Reply = tuple[Any, ...]


def child_init(app_spec: str | None, dsn: str) -> None:
    """Load ``-A`` in this child through its loader and bind the app to the parent's ``dsn``
    (passed here, never through the environment)."""
    from .. import loading

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _dsn.append(dsn)
    if app_spec is not None:
        app = loading.resolve(app_spec)
        _registry.update(loading.jobs_of(app))
        app.bind(dsn)


def _connection() -> AbstractContextManager[psycopg.Connection[Any]]:
    with _lock:
        if not _pool:
            _pool.append(
                ConnectionPool(
                    _dsn[0], min_size=1, max_size=2, kwargs={"autocommit": True}, open=True
                )
            )
    return _pool[0].connection()


def child_run(claimed: ClaimedJob) -> Reply:
    """Run one claimed job's body here, with the same ``current_job()`` and ``step`` a thread
    body gets (its signal never fires: a cancel is fenced when the child answers)."""
    from .. import context, steps
    from .attempt import context_for

    name, job_input = claimed.name, claimed.input
    definition = _registry[name]
    runner = steps.StepRunner(
        lease=Lease(claimed.id, claimed.lease_token, claimed.attempt),
        connection=_connection,
        signal=AttemptSignal(),
        clock=SYSTEM_CLOCK,
    )
    job_token = context.bind(context_for(claimed, runner.signal, runner))
    step_token = steps.bind(runner)
    try:
        args, kwargs = payload.decode_input(job_input)
        value = definition.fn(*args, **kwargs)
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
        if isinstance(value, Outcome):
            raise value
        return ("ok", payload.dumps(value, what=f"the result of job {name!r}"))
    except StepSuspended as exc:
        wake = exc.wake_at.isoformat() if isinstance(exc.wake_at, datetime) else None
        return ("suspend", exc.state, wake, exc.reason)
    except Snooze as exc:
        return ("snooze", exc.delay_s)
    except Cancel as exc:
        return ("cancel", exc.reason)
    except Discard as exc:
        return ("discard", exc.reason)
    except StepError as exc:
        return ("step_error", exc.message, exc.hint, exc.code.value)
    except Exception as exc:
        return ("error", error_text(exc), definition.retry.retries(exc))
    finally:
        steps.unbind(step_token)
        context.unbind(job_token)


def body_result_from_child(reply: Reply) -> BodyResult:
    """Turn a child's plain reply back into the parent's ``BodyResult``."""
    from ..errors import ErrorCode

    kind = reply[0]
    if kind == "ok":
        return BodyResult(output_json=reply[1])
    if kind == "suspend":
        wake = datetime.fromisoformat(reply[2]) if reply[2] else None
        return BodyResult(error=StepSuspended(reply[1], wake, reply[3]))
    if kind == "snooze":
        return BodyResult(error=Snooze(reply[1]))
    if kind == "cancel":
        return BodyResult(error=Cancel(reply[1]))
    if kind == "discard":
        return BodyResult(error=Discard(reply[1]))
    if kind == "step_error":
        return BodyResult(error=StepError(reply[1], hint=reply[2], code=ErrorCode(reply[3])))
    return BodyResult(error=RemoteJobError(reply[1], reply[2]))
