"""Durable steps: ``step.run``, ``step.sleep``, ``step.sleep_until``, ``step.wait_for_event``.

Why it exists: a multi-step job must be safe to kill at any line. Each step's result is persisted
(under the attempt's lease token) BEFORE the call returns, so a later attempt replays the stored
value instead of running the side effect again. Steps are matched by position as well as name:
the same name twice in one run is refused before any side effect, and a run whose step names
differ from what was recorded (non-deterministic code) is dead-lettered with a clear error
rather than silently re-running side effects. Sleeping and waiting park the job: it gives its
worker slot and lease back and is claimed again when due, so sleeping a week holds nothing.

What it is not: the SQL (``db/steps.py``) or a workflow language. Bodies are
plain Python; replay simply runs them again from the top.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg

from ujobs_bridge._internal.clock import Clock
from ujobs_bridge._internal.db import steps as store
from ujobs_bridge._internal.db.connections import retrying, transient
from ujobs_bridge._internal.db.steps import Lease, StepRecord, StepResult
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.jobs.error_text import error_text
from ujobs_bridge._internal.jobs.group_commit import GroupCommit
from ujobs_bridge._internal.jobs.instants import instant_option
from ujobs_bridge._internal.jobs.payload import dumps
from ujobs_bridge._internal.jobs.validation import NAME_PATTERN
from ujobs_bridge.errors import (
    AttemptAborted,
    ConfigError,
    DatabaseUnavailableError,
    ErrorCode,
    EventTimeoutError,
    StepError,
    StepSuspended,
)

T = TypeVar("T")

DEFAULT_EVENT_RETENTION_S = 7 * 24 * 3600.0
STEP_NAME_MAX = 200
STEP_RETRY_S = 60.0  # the longest a step write is retried through an outage (or lease lost)

ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]


class StepRunner:
    """The steps of ONE attempt. Built by the worker; reached through ``step``. ``commits``: the
    process's group commit of step results (the worker shares one among all its bodies); a
    runner without one gets its own. ``fresh``: the attempt's claim is the row's first
    (``ClaimedJob.deliveries == 1``): no earlier claim could have stored a step under its lease,
    so the stored steps are not read (one round trip per job saved)."""

    def __init__(
        self,
        *,
        lease: Lease,
        connection: ConnectionSource,
        signal: AttemptSignal,
        clock: Clock,
        event_retention_s: float = DEFAULT_EVENT_RETENTION_S,
        commits: GroupCommit | None = None,
        fresh: bool = False,
    ) -> None:
        self.lease = lease
        self.connection = connection
        self.commits = commits if commits is not None else GroupCommit(connection)
        self.signal = signal
        self.clock = clock
        self.event_retention_s = event_retention_s
        # fresh: nothing of this run is stored (its claim is the row's first), so nothing is
        # read back to replay
        self._recorded: dict[int, StepRecord] | None = {} if fresh else None
        self._seen: set[str] = set()
        self._ordinal = 0

    # ---------------------------------------------------------------- bookkeeping

    def _db(self, op: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``op`` on a step connection, retried as ``_retried`` says."""

        def once() -> T:
            with self.connection() as conn:
                return op(conn)

        return self._retried(once)

    def _retried(self, op: Callable[[], T]) -> T:
        """Run ``op``. An infrastructure error (a restart, a lost connection, "starting up") is
        retried with backoff while the attempt may still hold its lease (every step statement is
        safe to run twice: a repeated write finds its own row), then raised as
        ``DatabaseUnavailableError``, which hands the attempt back uncounted."""
        try:
            return retrying(op, within_s=STEP_RETRY_S, gave_up=lambda: self.signal.aborted)
        except psycopg.Error as exc:
            if not transient(exc):
                raise
            raise DatabaseUnavailableError(
                f"the jobs database was unavailable for a step write of job {self.lease.run_id}:"
                f" {exc}",
                hint="the attempt is handed back uncounted and runs again once it is back",
            ) from exc

    def _recorded_steps(self) -> dict[int, StepRecord]:
        if self._recorded is None:
            run_id = self.lease.run_id
            self._recorded = {r.ordinal: r for r in self._db(lambda c: store.step_list(c, run_id))}
        return self._recorded

    def _check(self) -> None:
        if self.signal.aborted:
            assert self.signal.code is not None
            raise AttemptAborted(self.signal.code, self.signal.reason)

    def _begin(self, name: str) -> tuple[int, StepRecord | None]:
        """Validate the name, take the next position, and return what was recorded there."""
        if not isinstance(name, str) or not name or len(name) > STEP_NAME_MAX:
            raise StepError(
                f"step name {name!r} is not allowed",
                code=ErrorCode.STEP_NAME_INVALID,
                hint=f"use a non-empty string of at most {STEP_NAME_MAX} characters",
            )
        if name in self._seen:
            raise StepError(
                f"step {name!r} was used twice in one run of job {self.lease.run_id}",
                code=ErrorCode.STEP_DUPLICATE,
                hint="give each step of a job a distinct name, e.g. f'charge-{item_id}'",
            )
        self._check()
        self._seen.add(name)
        ordinal = self._ordinal
        self._ordinal += 1
        recorded = self._recorded_steps().get(ordinal)
        if recorded is not None and recorded.name != name:
            raise StepError(
                f"step {ordinal + 1} of job {self.lease.run_id} was recorded as {recorded.name!r} "
                f"but this run calls it {name!r}",
                code=ErrorCode.NONDETERMINISM,
                hint="step names and their order must not depend on time, randomness or data that "
                "changes between attempts; requeue the job after fixing the code",
            )
        return ordinal, recorded

    def _lost(self) -> AttemptAborted:
        self.signal.abort(ErrorCode.LEASE_LOST, "the lease was lost while writing a step")
        return AttemptAborted(ErrorCode.LEASE_LOST, "the lease was lost while writing a step")

    def _ours(self, existing: StepRecord) -> bool:
        """A completed row this very attempt wrote (an earlier commit of ours that the client saw
        fail), as opposed to one another attempt wrote after taking our lease over."""
        return existing.status == "completed" and existing.job_attempt == self.lease.job_attempt

    def _read_back(self, name: str) -> StepRecord | None:
        run_id = self.lease.run_id
        rows = self._db(lambda c: store.step_list(c, run_id))
        return next((r for r in rows if r.name == name), None)

    # ---------------------------------------------------------------- run

    def run(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        ordinal, recorded = self._begin(name)
        if recorded is not None and recorded.status == "completed":
            replayed: T = recorded.output
            return replayed
        started = datetime.now(UTC)
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:
            if isinstance(exc, Exception):
                self._record_failure(name, ordinal, exc, started)
            raise
        stored: T = self._persist(name, ordinal, value, started)
        return stored

    async def run_async(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ordinal, recorded = await asyncio.to_thread(self._begin, name)
        if recorded is not None and recorded.status == "completed":
            return recorded.output
        started = datetime.now(UTC)
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except BaseException as exc:
            if isinstance(exc, Exception):
                await asyncio.to_thread(self._record_failure, name, ordinal, exc, started)
            raise
        return await asyncio.to_thread(self._persist, name, ordinal, value, started)

    def _persist(self, name: str, ordinal: int, value: Any, started: datetime) -> Any:
        output = dumps(value, what=f"the result of step {name!r}")
        self._check()  # a step write after the stop signal is refused
        result = StepResult(self.lease, name, ordinal, output, started)
        if self._retried(lambda: self.commits.write(result)):
            return value
        existing = self._read_back(name)
        if existing is not None and self._ours(existing):
            return existing.output  # an earlier commit of this very write landed
        raise self._lost()

    def _record_failure(self, name: str, ordinal: int, exc: Exception, started: datetime) -> None:
        if self.signal.aborted:
            return
        text, lease = error_text(exc), self.lease
        self._db(lambda c: store.step_fail(c, lease, name, ordinal, text, started))

    # ---------------------------------------------------------------- sleep

    def sleep(self, name: str, duration: float | timedelta) -> None:
        seconds = validation.seconds(
            "sleep duration", duration, allow_zero=True, maximum=validation.MAX_DELAY_S
        )
        self._suspend_until(name, None, seconds)

    def sleep_until(self, name: str, instant: datetime) -> None:
        if instant.tzinfo is None:
            raise ConfigError(
                f"sleep_until({name!r}) got a naive datetime",
                hint="pass an aware datetime, e.g. with tzinfo=UTC",
            )
        self._suspend_until(name, instant_option(f"sleep_until({name!r})", instant), None)

    def _suspend_until(self, name: str, instant: datetime | None, seconds: float | None) -> None:
        ordinal, recorded = self._begin(name)
        if recorded is not None and recorded.status == "completed":
            return
        now = self.clock.sql_now()

        def write(conn: psycopg.Connection[Any]) -> tuple[bool, Any] | None:
            if recorded is not None and store.step_wake_if_due(conn, self.lease, name, now):
                return None
            return store.step_suspend(
                conn,
                self.lease,
                name,
                ordinal,
                status="sleeping",
                wake_at=instant,
                duration_s=seconds,
                event=None,
                correlation_key=None,
                now=now,
            )

        written = self._db(write)
        if written is None:
            return
        ok, wake_at = written
        if not ok:
            existing = self._read_back(name)
            if existing is not None and self._ours(existing):
                return
            raise self._lost()
        raise StepSuspended("sleeping", wake_at, f"sleeping until {wake_at} ({name})")

    # ---------------------------------------------------------------- events

    def wait_for_event(
        self, name: str, event: str, *, key: str, timeout: float | timedelta | None = None
    ) -> Any:
        """Return the payload of the first ``event`` sent with ``key``; suspend until one comes.
        Raises ``EventTimeoutError`` once ``timeout`` has passed without one."""
        if not isinstance(event, str) or not NAME_PATTERN.match(event):
            raise ConfigError(
                f"event name {event!r} is not allowed",
                hint="use 1-48 characters from A-Z a-z 0-9 _ . : -",
            )
        if not isinstance(key, str) or not key:
            raise ConfigError(
                f"event key {key!r} is not allowed", hint="pass a non-empty string key"
            )
        timeout_s = (
            validation.seconds("event timeout", timeout, maximum=validation.MAX_DELAY_S)
            if timeout is not None
            else None
        )
        ordinal, recorded = self._begin(name)
        if recorded is not None and recorded.status == "completed":
            return self._event_outcome(name, recorded.output)
        started = datetime.now(UTC)
        now = self.clock.sql_now()
        timed_out = {"timed_out": True, "event": event, "key": key}

        def take(conn: psycopg.Connection[Any]) -> tuple[str, Any]:
            found, payload = store.event_take(
                conn,
                self.lease,
                name,
                ordinal,
                event=event,
                correlation_key=key,
                retention_s=self.event_retention_s,
                started_at=started,
                now=now,
            )
            if found == "lost":
                raise self._lost()
            if found == "event":
                return "event", payload
            if (
                recorded is not None
                and recorded.status == "waiting"
                and recorded.wake_at is not None
                and store.step_wake_if_due(
                    conn, self.lease, name, now, dumps(timed_out, what="timeout")
                )
            ):
                return "timed_out", timed_out
            return "suspended", store.step_suspend(
                conn,
                self.lease,
                name,
                ordinal,
                status="waiting",
                wake_at=None,
                duration_s=timeout_s,
                event=event,
                correlation_key=key,
                now=now,
            )

        kind, value = self._db(take)
        if kind == "event":
            return value
        if kind == "timed_out":
            return self._event_outcome(name, value)
        ok, wake_at = value
        if not ok:
            raise self._lost()
        until = "no timeout" if timeout_s is None else f"until {wake_at}"
        raise StepSuspended(
            "waiting", wake_at, f"waiting for event {event!r} key {key!r} ({until})"
        )

    def _event_outcome(self, name: str, output: Any) -> Any:
        if isinstance(output, dict) and output.get("timed_out"):
            raise EventTimeoutError(
                f"step {name!r} waited for event {output.get('event')!r} key {output.get('key')!r} and timed out",
                hint="catch EventTimeoutError in the job to handle a missing event",
            )
        if isinstance(output, dict) and "payload" in output:
            return output["payload"]
        return output


_current: contextvars.ContextVar[StepRunner | None] = contextvars.ContextVar(
    "ujobs_step_runner", default=None
)


def bind(runner: StepRunner | None) -> contextvars.Token[StepRunner | None]:
    return _current.set(runner)


def unbind(token: contextvars.Token[StepRunner | None]) -> None:
    _current.reset(token)


def _runner() -> StepRunner:
    runner = _current.get()
    if runner is None:
        raise StepError(
            "a step was called outside a running job",
            code=ErrorCode.STEP_OUTSIDE_JOB,
            hint="call step.run / step.sleep / step.wait_for_event from inside a @job body run by a worker",
        )
    return runner


class _StepFacade:
    """``from ujobs_bridge import step``: the current attempt's steps."""

    def run(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return _runner().run(name, fn, *args, **kwargs)

    async def run_async(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await _runner().run_async(name, fn, *args, **kwargs)

    def sleep(self, name: str, duration: float | timedelta) -> None:
        _runner().sleep(name, duration)

    async def sleep_async(self, name: str, duration: float | timedelta) -> None:
        await asyncio.to_thread(functools.partial(_runner().sleep, name, duration))

    def sleep_until(self, name: str, instant: datetime) -> None:
        _runner().sleep_until(name, instant)

    async def sleep_until_async(self, name: str, instant: datetime) -> None:
        await asyncio.to_thread(functools.partial(_runner().sleep_until, name, instant))

    def wait_for_event(
        self, name: str, event: str, *, key: str, timeout: float | timedelta | None = None
    ) -> Any:
        return _runner().wait_for_event(name, event, key=key, timeout=timeout)

    async def wait_for_event_async(
        self, name: str, event: str, *, key: str, timeout: float | timedelta | None = None
    ) -> Any:
        runner = _runner()
        return await asyncio.to_thread(
            functools.partial(runner.wait_for_event, name, event, key=key, timeout=timeout)
        )


step = _StepFacade()
