"""``job``: declare a function as durable background work, and enqueue it.

Why it exists: a job is a plain function plus the policy the engine needs to run it safely
elsewhere (queue, priority, retries, timeout, expiry). Declaring it validates every option at
import, so a NaN timeout or a bad queue name fails the deploy, not the first retry at 3 a.m.

    @job(queue="emails", max_attempts=5, timeout=30)
    def send_welcome(user_id: int) -> None: ...

    send_welcome.enqueue(42)                                   # default client
    send_welcome.configure(delay=60, conn=conn).enqueue(42)    # in the caller's transaction
    send_welcome.configure(send_commit="off").enqueue(42)      # returns before the WAL flush
    client.enqueue_many([send_welcome.call(i) for i in ids])   # one statement

What it is not: a registry. Workers find jobs by scanning the module named with ``-A``
(``loading.py``); nothing global is mutated by declaring one.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

import psycopg

from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db.enqueue import EnqueueSpec
from ujobs_bridge._internal.ids import new_job_id
from ujobs_bridge._internal.jobs import send_commit as commits
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.jobs.instants import instant_option
from ujobs_bridge._internal.jobs.payload import encode_input
from ujobs_bridge._internal.jobs.retry import (
    DEFAULT_BACKOFF_BASE_S,
    DEFAULT_BACKOFF_CAP_S,
    DEFAULT_MAX_ATTEMPTS,
    RetryPolicy,
    retry_classes,
)
from ujobs_bridge._internal.observe import tracing
from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.records import ClaimedJob, JobRef

if TYPE_CHECKING:
    from uuid import UUID

    from ujobs_bridge._internal.jobs.send_commit import SendCommit
    from ujobs_bridge.client import Client


def default_client() -> Client:
    # import cost: `import ujobs_bridge` (and every job module) loads the client only when a job
    # is enqueued with neither client= nor conn=
    from ujobs_bridge.client import default_client as make

    return make()


P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"
PRIORITY_MIN, PRIORITY_MAX = -32768, 32767


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Per-enqueue options; every one validated when set."""

    delay_s: float = 0.0
    run_at: datetime | None = None
    idempotency_key: str | None = None
    priority: int | None = None
    queue: str | None = None
    expires_at: datetime | None = None
    expires_in_s: float | None = None
    tenant_id: str | None = None
    traceparent: str | None = None
    enqueued_by: str | None = None


# The options of a plain ``job.call(...)``: frozen, so one instance serves every call.
_NO_OPTIONS = EnqueueOptions()


def _options(
    *,
    delay: float | timedelta | None = None,
    run_at: datetime | None = None,
    idempotency_key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    expires: float | timedelta | datetime | None = None,
    tenant_id: str | None = None,
    traceparent: str | None = None,
    enqueued_by: str | None = None,
) -> EnqueueOptions:
    if delay is not None and run_at is not None:
        raise ConfigError(
            "both delay and run_at were given",
            hint="pass one of them",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    if run_at is not None and not isinstance(run_at, datetime):
        raise ConfigError(
            f"run_at must be a datetime, got {type(run_at).__name__} {run_at!r}",
            hint="pass an aware datetime, or delay= in seconds",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    if run_at is not None and run_at.tzinfo is None:
        raise ConfigError(
            f"run_at {run_at!r} has no time zone",
            hint="pass an aware datetime, e.g. datetime.now(UTC)",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    expires_at: datetime | None = None
    expires_in: float | None = None
    if isinstance(expires, datetime):
        if expires.tzinfo is None:
            raise ConfigError(
                "expires has no time zone",
                hint="pass an aware datetime",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        expires_at = instant_option("expires", expires)
    elif expires is not None:
        expires_in = validation.seconds("expires", expires, maximum=validation.MAX_DELAY_S)
    if idempotency_key is not None:
        validation.text_option("idempotency_key", idempotency_key, max_length=512)
    for what, text in (("tenant_id", tenant_id), ("traceparent", traceparent)):
        if text is not None:
            validation.text_option(what, text, max_length=256)
    if enqueued_by is not None:
        validation.text_option("enqueued_by", enqueued_by, max_length=256)
    return EnqueueOptions(
        delay_s=validation.seconds("delay", delay, allow_zero=True, maximum=validation.MAX_DELAY_S)
        if delay is not None
        else 0.0,
        run_at=instant_option("run_at", run_at) if run_at is not None else None,
        idempotency_key=idempotency_key,
        priority=_priority(priority) if priority is not None else None,
        queue=validation.queue_name(queue) if queue is not None else None,
        expires_at=expires_at,
        expires_in_s=expires_in,
        tenant_id=tenant_id,
        traceparent=traceparent,
        enqueued_by=enqueued_by,
    )


def _client_class() -> type[Client]:
    # import cost: the client module only when a client= is given (as default_client)
    from ujobs_bridge.client import Client

    return Client


def _check_target(client: object, conn: object) -> None:
    """``client=`` a ``Client`` and ``conn=`` a psycopg connection, or None: refused here,
    before an enqueue finds out by an ``AttributeError``."""
    if client is not None and not isinstance(client, _client_class()):
        raise ConfigError(
            f"client= must be a ujobs_bridge Client, got {type(client).__name__}",
            hint="pass client=ujobs_bridge.connect(DSN), or conn= a psycopg connection",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    if conn is not None and not isinstance(conn, psycopg.Connection | psycopg.AsyncConnection):
        raise ConfigError(
            f"conn= must be a psycopg Connection or AsyncConnection, got {type(conn).__name__}",
            hint="pass the psycopg connection whose transaction the job joins",
            code=ErrorCode.JOB_OPTION_INVALID,
        )


def _priority(value: int) -> int:
    return validation.positive_int("priority", value, minimum=PRIORITY_MIN, maximum=PRIORITY_MAX)


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job call waiting to be inserted, as ``client.enqueue_many`` takes it."""

    definition: JobDefinition[Any, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: EnqueueOptions

    def spec(self) -> EnqueueSpec:
        return self.spec_as(new_job_id(), tracing.current_traceparent)

    def spec_as(self, job_id: UUID, context: Callable[[], str | None] | str | None) -> EnqueueSpec:
        """The row under ``job_id``; ``context`` is the caller's trace context (or how to read
        it), used when the options carry none."""
        d, o = self.definition, self.options
        expires_in = o.expires_in_s if o.expires_in_s is not None else d.expires_s
        traceparent = o.traceparent or (context() if callable(context) else context)
        return EnqueueSpec(
            id=job_id,
            name=d.name,
            queue=o.queue or d.queue,
            input_json=encode_input(self.args, self.kwargs, job_name=d.name),
            max_attempts=d.retry.max_attempts,
            priority=o.priority if o.priority is not None else d.priority,
            idempotency_key=o.idempotency_key,
            run_at=o.run_at,
            delay_s=o.delay_s,
            expires_at=o.expires_at,
            expires_in_s=None if o.expires_at is not None else expires_in,
            tenant_id=o.tenant_id,
            traceparent=traceparent,
            enqueued_by=o.enqueued_by,
        )


class JobCall(Generic[P, R]):
    """A job with enqueue options bound: ``send.configure(delay=5).enqueue(42)``.

    Where the row goes (``client``, ``conn``) and how durable its own commit is
    (``send_commit``) belong to the call, not to the row: ``call()`` keeps none of them (a batch is
    sent by ``client.enqueue_many``, which takes its own)."""

    def __init__(
        self,
        definition: JobDefinition[P, R],
        options: EnqueueOptions,
        client: Client | None,
        conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None,
        send_commit: SendCommit | None = None,
    ) -> None:
        self.definition = definition
        self.options = options
        self.client = client
        self.conn = conn
        self.send_commit = send_commit

    def call(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueRequest:
        return EnqueueRequest(self.definition, tuple(args), dict(kwargs), self.options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobRef:
        spec = self.call(*args, **kwargs).spec()
        conn = self.conn
        if isinstance(conn, psycopg.AsyncConnection):
            raise ConfigError(
                "enqueue() was given an async connection",
                hint="await .enqueue_async(...) with an AsyncConnection, or pass a sync psycopg.Connection",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        client = self.client
        if client is None:
            if conn is not None:
                return enqueue_db.job_enqueue(conn, spec, None)
            client = default_client()
        return client.enqueue_spec(spec, conn, self.send_commit)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobRef:
        """Enqueue from async code. With an ``AsyncConnection`` (``conn=``) the row joins that
        connection's transaction; otherwise the pool's insert runs off the event loop."""
        conn = self.conn
        if isinstance(conn, psycopg.AsyncConnection):
            spec = self.call(*args, **kwargs).spec()
            now = self.client.clock.sql_now() if self.client is not None else None
            return await enqueue_db.job_enqueue_async(conn, spec, now)
        return await asyncio.to_thread(functools.partial(self.enqueue, *args, **kwargs))


class JobDefinition(Generic[P, R]):
    """A declared job. Calling it runs the function in-process, like calling the function."""

    def __init__(
        self,
        fn: Callable[P, R] | Callable[P, Awaitable[R]],
        *,
        name: str,
        queue: str,
        priority: int,
        retry: RetryPolicy,
        timeout_s: float | None,
        expires_s: float | None,
        on_time_limit: Callable[[ClaimedJob, float], BaseException] | None = None,
        work_starts_late: bool = False,
    ) -> None:
        """``on_time_limit``: under ``--pool processes``, what the attempt failed with when the
        pool killed its child at a hard time limit the body announced (``ujobs_bridge.ext.worker
        .pool_time_limits``), called in the worker process with the claimed job and the limit in
        seconds; without it such an attempt fails with ``UJ_JOB_TIMEOUT``. ``work_starts_late``:
        the body runs a prologue of its own before its real work (a framework's tracer) and says
        when that work starts (``ujobs_bridge.ext.jobs.work_starts``): a first delivery's start
        is recorded from then on, so a worker that dies in the prologue is not charged for it."""
        self.fn = fn
        self.name = validation.job_name(name)
        self.queue = validation.queue_name(queue)
        self.priority = _priority(priority)
        self.retry = retry
        self.timeout_s = timeout_s
        self.expires_s = expires_s
        self.on_time_limit = on_time_limit
        self.work_starts_late = work_starts_late
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<job {self.name} queue={self.queue}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R | Awaitable[R]:
        return self.fn(*args, **kwargs)

    def configure(
        self,
        *,
        client: Client | None = None,
        conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
        expires: float | timedelta | datetime | None = None,
        tenant_id: str | None = None,
        traceparent: str | None = None,
        enqueued_by: str | None = None,
        send_commit: SendCommit | None = None,
    ) -> JobCall[P, R]:
        """Bind enqueue options. ``send_commit``: how durable this enqueue's own commit is when
        it returns (``"on"``: flushed, ``"local"``, ``"off"``; default: the client's); refused
        with ``conn=``, whose transaction commits as its owner commits it."""
        _check_target(client, conn)
        if send_commit is not None:
            commits.checked(send_commit, what="send_commit")
            if conn is not None:
                raise commits.refused_in_transaction("send_commit")
        options = _options(
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            priority=priority,
            queue=queue,
            expires=expires,
            tenant_id=tenant_id,
            traceparent=traceparent,
            enqueued_by=enqueued_by,
        )
        return JobCall(self, options, client, conn, send_commit)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueRequest:
        return EnqueueRequest(self, tuple(args), dict(kwargs), _NO_OPTIONS)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobRef:
        return JobCall(self, EnqueueOptions(), None, None).enqueue(*args, **kwargs)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobRef:
        return await JobCall(self, EnqueueOptions(), None, None).enqueue_async(*args, **kwargs)

    def with_options(self, **changes: Any) -> JobDefinition[P, R]:
        """A copy with other declaration options (used by tests and the demo)."""
        retry = changes.pop("retry", self.retry)
        clone: JobDefinition[P, R] = JobDefinition(
            self.fn,
            name=changes.pop("name", self.name),
            queue=changes.pop("queue", self.queue),
            priority=changes.pop("priority", self.priority),
            retry=retry,
            timeout_s=changes.pop("timeout_s", self.timeout_s),
            expires_s=changes.pop("expires_s", self.expires_s),
            on_time_limit=changes.pop("on_time_limit", self.on_time_limit),
            work_starts_late=changes.pop("work_starts_late", self.work_starts_late),
        )
        if changes:
            raise ConfigError(
                f"unknown job options {sorted(changes)}", code=ErrorCode.JOB_OPTION_INVALID
            )
        return clone


@overload
def job(fn: Callable[P, R], /) -> JobDefinition[P, R]: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff: float | timedelta = DEFAULT_BACKOFF_BASE_S,
    backoff_factor: float = 2.0,
    backoff_cap: float | timedelta = DEFAULT_BACKOFF_CAP_S,
    jitter: bool = True,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
    timeout: float | timedelta | None = None,
    expires: float | timedelta | None = None,
) -> Callable[[Callable[P, R]], JobDefinition[P, R]]: ...


def job(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff: float | timedelta = DEFAULT_BACKOFF_BASE_S,
    backoff_factor: float = 2.0,
    backoff_cap: float | timedelta = DEFAULT_BACKOFF_CAP_S,
    jitter: bool = True,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
    timeout: float | timedelta | None = None,
    expires: float | timedelta | None = None,
) -> JobDefinition[P, R] | Callable[[Callable[P, R]], JobDefinition[P, R]]:
    """Declare a job (sync or ``async def``). Name defaults to ``module.function``."""

    def decorate(target: Callable[P, R]) -> JobDefinition[P, R]:
        if not callable(target):
            raise ConfigError(
                f"@job needs a function, got {target!r}", code=ErrorCode.JOB_OPTION_INVALID
            )
        policy = RetryPolicy(
            max_attempts=max_attempts,
            backoff_base_s=validation.seconds(
                "backoff", backoff, allow_zero=True, maximum=validation.MAX_DELAY_S
            ),
            backoff_factor=backoff_factor,
            backoff_cap_s=validation.seconds(
                "backoff_cap", backoff_cap, allow_zero=True, maximum=validation.MAX_DELAY_S
            ),
            jitter=jitter,
            retry_on=retry_classes(retry_on),
        )
        return JobDefinition(
            target,
            name=name if name is not None else f"{target.__module__}.{target.__qualname__}",
            queue=queue,
            priority=priority,
            retry=policy,
            timeout_s=validation.seconds("timeout", timeout, maximum=validation.MAX_DELAY_S)
            if timeout is not None
            else None,
            expires_s=validation.seconds("expires", expires, maximum=validation.MAX_DELAY_S)
            if expires is not None
            else None,
        )

    if fn is not None:
        return decorate(fn)
    return decorate
