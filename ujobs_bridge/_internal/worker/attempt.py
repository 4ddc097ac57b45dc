"""The attempt core: run ONE claimed attempt's body and turn how it ended into a ``Settlement``.

Why it exists: every place a body runs (a body thread, the event loop, a child process, a test
kit's ``perform``) must bind the same ``current_job()`` and ``step``, decode the input the same
way, apply an ``async def`` body's ``timeout=`` the same way, and sort how it ended through the
same decision table (done / retry after backoff / dead / cancelled / handed back uncounted /
nothing to write because the lease is gone). One copy of each is what keeps them from drifting.

The entry points: ``run_body`` (sync; an async body runs on a fresh event loop) and
``run_body_async`` (on the caller's loop) return a ``BodyResult``; ``settle`` decides the
``Settlement``; ``perform`` / ``perform_async`` do both. When our own code fails between the
claim and the settle (not the body: the runtime, an observer, the decision table itself),
``body_died`` is the attempt's result and ``died_settlement`` its outcome without the decision
table: failed, counted and retried per the job's policy (``UJ_WORKER_LOST``), never left
``running``.

What it is not: the loop that claims, the lease keeper or the outcome batch (``loop.py``,
``heartbeat.py``, ``outcome_batch.py``), nor where bodies run (``runtimes.py``, ``child.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from ujobs_bridge import steps
from ujobs_bridge._internal.jobs import context
from ujobs_bridge._internal.jobs.context import AttemptSignal, JobContext
from ujobs_bridge._internal.jobs.error_text import FormattedError, describe, error_text
from ujobs_bridge._internal.jobs.outcomes import Cancel, Discard, Fail, Outcome, Snooze
from ujobs_bridge._internal.jobs.payload import (
    DEFAULT_MAX_RESULT_BYTES,
    decode_input,
    dumps,
    result_size,
    result_too_large,
)
from ujobs_bridge._internal.observe import tracing
from ujobs_bridge.errors import (
    AttemptAborted,
    DatabaseUnavailableError,
    ErrorCode,
    PayloadError,
    StepError,
    StepSuspended,
)
from ujobs_bridge.job import JobDefinition
from ujobs_bridge.records import ClaimedJob, JobState, Settlement
from ujobs_bridge.steps import StepRunner

T = TypeVar("T")
# What ``work_starts()`` calls in a body that says when its real work starts (None: nothing)
Starting = Callable[[], object] | None
OUTAGE_DELAY_S = 1.0  # an attempt handed back for a database outage runs again after this

# The worker's own reasons to give an attempt back uncounted: its drain, a loop of its that
# failed, bodies of other jobs hung in its slots. Nothing a body raises is among them.
HANDED_BACK = frozenset({ErrorCode.WORKER_DRAINING, ErrorCode.WORKER_FAILED, ErrorCode.WORKER_HUNG})

__all__ = [
    "BodyResult",
    "RemoteJobError",
    "body_died",
    "died_settlement",
    "error_text",
    "perform",
    "perform_async",
    "run_body",
    "run_body_async",
    "settle",
]


class RemoteJobError(FormattedError):
    """A body that failed in a child process: its traceback as text, and whether the job's own
    retry policy (evaluated in the child, where the exception class lives) wants another go."""

    def __init__(self, text: str, retryable: bool) -> None:
        super().__init__(text)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class BodyResult:
    """What the body did: returned ``output_json``, or raised ``error``."""

    output_json: str | None = None
    error: BaseException | None = None


def body_died(where: str, exc: BaseException) -> BodyResult:
    """The result of an attempt whose ``where`` (``the body thread``...) failed in our own code:
    a failure the job's policy retries (``AttemptAborted`` always is, up to ``max_attempts``)."""
    return BodyResult(
        error=AttemptAborted(ErrorCode.WORKER_LOST, f"{where} failed: {describe(exc)}")
    )


def died_settlement(
    definition: JobDefinition[Any, Any], claimed: ClaimedJob, where: str, exc: BaseException
) -> Settlement:
    """Where the row of an attempt goes when even deciding its outcome failed: ready again after
    the policy's delay while attempts are left, else dead; built without the decision table."""
    error = f"{ErrorCode.WORKER_LOST.value}: {where} failed: {describe(exc)}"
    if claimed.attempt >= claimed.max_attempts:
        return Settlement(claimed.id, claimed.lease_token, state=JobState.DEAD, error=error)
    try:
        delay = definition.retry.delay_s(claimed.attempt)
    except Exception:
        delay = OUTAGE_DELAY_S
    return Settlement(
        claimed.id, claimed.lease_token, state=JobState.READY, delay_s=delay, error=error
    )


def context_for(
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner | None = None,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    starting: Starting = None,
) -> JobContext:
    """The ``current_job()`` of this attempt; with a step runner it also has the clock and the
    jobs-database connection of the steps. ``starting``: what ``work_starts()`` calls (a body
    whose definition has ``work_starts_late``, its start not recorded yet)."""
    if runner is None:
        return JobContext(
            claimed.id,
            claimed.name,
            claimed.queue,
            claimed.attempt,
            claimed.max_attempts,
            signal,
            deliveries=claimed.deliveries,
            max_result_bytes=max_result_bytes,
            starting=starting,
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
        max_result_bytes=max_result_bytes,
        starting=starting,
    )


@contextmanager
def _bound(
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner | None,
    limit: int,
    starting: Starting = None,
) -> Iterator[None]:
    token = context.bind(context_for(claimed, signal, runner, limit, starting))
    step_token = steps.bind(runner)
    try:
        yield
    finally:
        steps.unbind(step_token)
        context.unbind(token)


def _failed(error: BaseException | None) -> bool:
    """An attempt whose span is marked as an error: not a suspension or a chosen outcome."""
    if isinstance(error, Fail):
        return True
    return error is not None and not isinstance(error, Outcome | StepSuspended)


def _returned(value: Any, name: str, limit: int) -> BodyResult:
    """The body's return value as its result: its JSON, or ``UJ_OUTPUT_TOO_LARGE`` when that is
    over ``limit`` bytes (the error is returned, not raised: no traceback keeps the text, or
    the value, alive; the caller's references go when it returns)."""
    if isinstance(value, Outcome):  # an outcome may be returned as well as raised
        return BodyResult(error=value)
    what = f"the result of job {name!r}"
    text = dumps(value, what=what)
    size = result_size(text, limit)
    if size is None:
        return BodyResult(output_json=text)
    del text
    return BodyResult(error=result_too_large(what, size, limit))


def run_body(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner | None = None,
    *,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    starting: Starting = None,
) -> BodyResult:
    """Run the body in the calling thread with its context (and its steps) bound. An ``async
    def`` body runs on a fresh event loop (in a helper thread if this thread already runs one).
    A result over ``max_result_bytes`` of JSON fails the attempt (``UJ_OUTPUT_TOO_LARGE``).
    ``starting``: what the body's ``work_starts()`` calls (``context_for``)."""
    limit = max_result_bytes
    if definition.is_async:
        return _on_fresh_loop(
            run_body_async(
                definition, claimed, signal, runner, max_result_bytes=limit, starting=starting
            )
        )
    bound = _bound(claimed, signal, runner, limit, starting)
    with tracing.attempt_span(claimed) as record, bound:
        try:
            args, kwargs = decode_input(claimed.input)
            value = definition.fn(*args, **kwargs)
            if inspect.iscoroutine(value):  # a sync wrapper around an async body
                value = _on_fresh_loop(value)
            result = _returned(value, claimed.name, limit)
            del value  # a large result's memory goes back now, not when the thread runs again
        except BaseException as exc:  # the decision table sorts every kind
            result = BodyResult(error=exc)
        record(result.error, _failed(result.error))
        return result


async def run_body_async(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner | None = None,
    *,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    starting: Starting = None,
) -> BodyResult:
    """Run an ``async def`` body on the running loop, with its context and steps bound and its
    ``timeout=`` applied (a timeout aborts the signal and fails the attempt)."""
    timeout = definition.timeout_s
    limit = max_result_bytes
    bound = _bound(claimed, signal, runner, limit, starting)
    with tracing.attempt_span(claimed) as record, bound:
        try:
            if timeout is None:
                result = await _awaited(definition, claimed, signal, limit)
            else:
                result = await asyncio.wait_for(
                    _awaited(definition, claimed, signal, limit), timeout
                )
        except TimeoutError:
            signal.abort(ErrorCode.JOB_TIMEOUT, f"the attempt ran past its {timeout}s timeout")
            result = BodyResult(
                error=AttemptAborted(ErrorCode.JOB_TIMEOUT, f"timed out after {timeout}s")
            )
        except asyncio.CancelledError:  # the loop went away under the body: nothing to say
            result = BodyResult()
        record(result.error, _failed(result.error))
        return result


async def _awaited(
    definition: JobDefinition[Any, Any], claimed: ClaimedJob, signal: AttemptSignal, limit: int
) -> BodyResult:
    """The body's own ending, caught here so a ``TimeoutError`` it raises is not taken for its
    timeout."""
    try:
        args, kwargs = decode_input(claimed.input)
        awaitable: Awaitable[Any] = definition.fn(*args, **kwargs)
        return _returned(await awaitable, claimed.name, limit)
    except asyncio.CancelledError:
        if signal.aborted:
            assert signal.code is not None
            return BodyResult(error=AttemptAborted(signal.code, signal.reason))
        raise
    except BaseException as exc:
        return BodyResult(error=exc)


def _on_fresh_loop(awaitable: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end on a new event loop; from a thread that already runs a loop,
    on a helper thread (with this context), since a loop cannot be nested."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    returned: list[T] = []
    raised: list[BaseException] = []
    ctx = contextvars.copy_context()

    def run() -> None:
        try:
            returned.append(ctx.run(asyncio.run, awaitable))
        except BaseException as exc:
            raised.append(exc)

    helper = threading.Thread(target=run, name="ujobs-fresh-loop")
    helper.start()
    helper.join()
    if raised:
        raise raised[0]
    return returned[0]


def perform(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner | None = None,
) -> Settlement | None:
    """Run one attempt to its end and decide where its row goes: ``run_body`` then ``settle``.
    ``None`` means there is nothing to write (the lease is gone or the job was cancelled)."""
    return settle(definition, claimed, run_body(definition, claimed, signal, runner), signal)


async def perform_async(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    signal: AttemptSignal,
    runner: StepRunner | None = None,
) -> Settlement | None:
    """``perform`` from a running loop: an ``async def`` body runs on it, a sync body on a
    helper thread."""
    if definition.is_async:
        result = await run_body_async(definition, claimed, signal, runner)
    else:
        result = await asyncio.to_thread(run_body, definition, claimed, signal, runner)
    return settle(definition, claimed, result, signal)


def settle(
    definition: JobDefinition[Any, Any],
    claimed: ClaimedJob,
    result: BodyResult,
    signal: AttemptSignal,
) -> Settlement | None:
    """Where the row goes after this attempt; ``None`` means there is nothing to write."""
    if signal.aborted and signal.code is ErrorCode.LEASE_LOST and not signal.certain:
        # The worker could not renew the lease, so it stopped the body; the lease may still be
        # its own (the database was down): a body that stopped is handed back uncounted, one
        # that returned or failed anyway is written as it ended. Fenced either way.
        error = result.error
        stopped = (error is None and result.output_json is None) or (
            isinstance(error, AttemptAborted) and error.code is ErrorCode.LEASE_LOST
        )
        if stopped:
            return Settlement(
                claimed.id,
                claimed.lease_token,
                state=JobState.READY,
                error=f"{ErrorCode.LEASE_LOST.value}: {signal.reason}",
                uncount=1,
            )
    elif signal.aborted and signal.code in (ErrorCode.LEASE_LOST, ErrorCode.JOB_CANCELLED):
        return None  # the row is no longer ours: a write would be fenced anyway
    if signal.aborted and signal.code in HANDED_BACK:
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
    if isinstance(error, AttemptAborted) and error.code in HANDED_BACK:
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
    if isinstance(error, DatabaseUnavailableError):  # our outage, not the job's failure
        return Settlement(
            claimed.id,
            claimed.lease_token,
            state=JobState.READY,
            delay_s=OUTAGE_DELAY_S,
            error=error_text(error),
            uncount=1,
            outage=True,  # given back a bounded number of times (db.leases.OUTAGE_HANDBACKS)
        )
    retryable = (
        not isinstance(error, PayloadError | StepError)
        and (error.retryable if isinstance(error, RemoteJobError) else retries(definition, error))
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


def retries(definition: JobDefinition[Any, Any], error: BaseException) -> bool:
    """Whether the job's retry policy wants another go after ``error``. A body that raised
    ``SystemExit`` or ``KeyboardInterrupt`` failed like any other: a policy that retries every
    ``Exception`` retries it too (only the worker's own drain hands an attempt back uncounted)."""
    policy = definition.retry
    if policy.retries(error) or isinstance(error, AttemptAborted):
        return True
    return isinstance(error, SystemExit | KeyboardInterrupt) and any(
        issubclass(Exception, kind) for kind in policy.retry_on
    )


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
    if isinstance(error, Fail):
        return Settlement(*ident, state=JobState.DEAD, error=error.error, failure_kind=error.kind)
    return None
