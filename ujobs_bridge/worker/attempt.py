"""Run ONE claimed attempt's body and turn how it ended into a ``Settlement``.

Why it exists: the decision table (done / retry after backoff / dead / cancelled / handed back
uncounted / nothing to write because the lease is gone) is the heart of at-least-once, and it is
easier to trust as one small function than spread through the claim loop.

What it is not: the loop that claims, the lease keeper or the ack batcher (``loop.py``).
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import context, steps
from ..context import AttemptSignal, JobContext
from ..errors import AttemptAborted, ErrorCode, PayloadError, StepError, StepSuspended
from ..job import JobDefinition
from ..outcomes import Cancel, Discard, Outcome, Snooze
from ..payload import decode_input, dumps
from ..records import ClaimedJob, JobState, Settlement
from ..steps import StepRunner

ERROR_TEXT_LIMIT = 4000


class RemoteJobError(Exception):
    """A body that failed in a child process: its traceback as text, and whether the job's own
    retry policy (evaluated in the child, where the exception class lives) wants another go."""

    def __init__(self, text: str, retryable: bool) -> None:
        super().__init__(text)
        self.text = text
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class BodyResult:
    """What the body did: returned ``output_json``, or raised ``error``."""

    output_json: str | None = None
    error: BaseException | None = None


def context_for(
    claimed: ClaimedJob, signal: AttemptSignal, runner: StepRunner | None = None
) -> JobContext:
    if runner is None:
        return JobContext(
            claimed.id,
            claimed.name,
            claimed.queue,
            claimed.attempt,
            claimed.max_attempts,
            signal,
            deliveries=claimed.deliveries,
        )
    return JobContext(
        id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        signal=signal,
        clock=runner.clock,
        database=runner.connection,
        deliveries=claimed.deliveries,
    )


def _returned(value: Any, name: str) -> BodyResult:
    if isinstance(value, Outcome):  # an outcome may be returned as well as raised
        return BodyResult(error=value)
    return BodyResult(output_json=dumps(value, what=f"the result of job {name!r}"))


def run_sync(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner | None = None,
) -> BodyResult:
    """Run a sync body in the calling thread with its context (and its steps) bound."""
    token = context.bind(context_for(claimed, signal, runner))
    step_token = steps.bind(runner)
    try:
        args, kwargs = decode_input(claimed.input)
        return _returned(definition.fn(*args, **kwargs), claimed.name)
    except BaseException as exc:  # the decision table below sorts every kind
        return BodyResult(error=exc)
    finally:
        steps.unbind(step_token)
        context.unbind(token)


async def run_async(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner | None = None,
) -> BodyResult:
    token = context.bind(context_for(claimed, signal, runner))
    step_token = steps.bind(runner)
    try:
        args, kwargs = decode_input(claimed.input)
        awaitable: Awaitable[Any] = definition.fn(*args, **kwargs)
        return _returned(await awaitable, claimed.name)
    except asyncio.CancelledError:
        if signal.aborted:
            assert signal.code is not None
            return BodyResult(error=AttemptAborted(signal.code, signal.reason))
        raise
    except BaseException as exc:
        return BodyResult(error=exc)
    finally:
        steps.unbind(step_token)
        context.unbind(token)


def error_text(exc: BaseException) -> str:
    if isinstance(exc, RemoteJobError):
        return exc.text[-ERROR_TEXT_LIMIT:]
    text = "".join(traceback.format_exception(exc)).strip()
    if len(text) > ERROR_TEXT_LIMIT:
        text = "…" + text[-ERROR_TEXT_LIMIT:]
    return text


def settle(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    result: BodyResult,
    signal: AttemptSignal,
) -> Settlement | None:
    """Where the row goes after this attempt; ``None`` means there is nothing to write."""
    if signal.aborted and signal.code in (ErrorCode.LEASE_LOST, ErrorCode.JOB_CANCELLED):
        return None  # the row is no longer ours: a write would be fenced anyway
    if signal.aborted and signal.code is ErrorCode.WORKER_DRAINING:
        return Settlement(
            claimed.id,
            claimed.lease_token,
            state=JobState.READY,
            error=f"{signal.code.value}: {signal.reason}",
            uncount=1,
        )
    error = result.error
    if signal.aborted and signal.code is ErrorCode.JOB_TIMEOUT and error is None:
        error = AttemptAborted(signal.code, signal.reason)
    if error is None:
        return Settlement(
            claimed.id, claimed.lease_token, state=JobState.DONE, output_json=result.output_json
        )
    if isinstance(error, AttemptAborted) and error.code is ErrorCode.WORKER_DRAINING:
        return Settlement(
            claimed.id,
            claimed.lease_token,
            state=JobState.READY,
            error=error_text(error),
            uncount=1,
        )
    outcome = _explicit(claimed, error)
    if outcome is not None:
        return outcome
    if isinstance(error, KeyboardInterrupt | SystemExit):
        return Settlement(
            claimed.id,
            claimed.lease_token,
            state=JobState.READY,
            error=error_text(error),
            uncount=1,
        )
    retryable = (
        not isinstance(error, PayloadError | StepError)
        and (
            error.retryable
            if isinstance(error, RemoteJobError)
            else definition.retry.retries(error) or isinstance(error, AttemptAborted)
        )
        and claimed.attempt < claimed.max_attempts
    )
    if retryable:
        return Settlement(
            claimed.id,
            claimed.lease_token,
            state=JobState.READY,
            delay_s=definition.retry.delay_s(claimed.attempt),
            error=error_text(error),
        )
    return Settlement(claimed.id, claimed.lease_token, state=JobState.DEAD, error=error_text(error))


def _explicit(claimed: ClaimedJob, error: BaseException) -> Settlement | None:
    """Suspensions and the outcomes a body chose: none of them is a failed attempt."""
    ident = (claimed.id, claimed.lease_token)
    if isinstance(error, StepSuspended):
        state = JobState.SLEEPING if error.state == "sleeping" else JobState.WAITING
        wake = error.wake_at if isinstance(error.wake_at, datetime) else None
        return Settlement(*ident, state=state, run_at=wake, uncount=1, error=None)
    if isinstance(error, Snooze):
        return Settlement(
            *ident,
            state=JobState.READY,
            delay_s=error.delay_s,
            uncount=1,
            error=f"{ErrorCode.JOB_SNOOZED.value}: {error}",
        )
    if isinstance(error, Cancel):
        return Settlement(
            *ident,
            state=JobState.CANCELLED,
            error=f"{ErrorCode.JOB_CANCELLED.value}: {error.reason}",
        )
    if isinstance(error, Discard):
        return Settlement(
            *ident, state=JobState.DEAD, error=f"{ErrorCode.JOB_DISCARDED.value}: {error.reason}"
        )
    return None
