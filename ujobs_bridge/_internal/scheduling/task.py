"""``task``: declare a periodic task, a schedule whose only effect is to enqueue jobs.

Why it exists: Celery beat sends a message when an entry is due; here the scheduler enqueues ordinary
durable jobs, once per occurrence. A task therefore says WHEN (cron or interval, time zone, catch-up
policy) and WHAT TO ENQUEUE for one ``Occurrence``; the work itself is a job, with the job's retries,
timeout and queue. Every option is validated at import, and refused rather than clamped.

    @job(queue="reports")
    def nightly_report(occurrence: str, catch_up: bool) -> None: ...

    nightly = task("nightly-report", cron="0 2 * * *", tz="Europe/Berlin", job=nightly_report)

    # or, to choose the jobs and their arguments:
    def fan_out(occ: Occurrence) -> list[EnqueueRequest]:
        return [sync_tenant.call(t, as_of=occ.at.isoformat()) for t in TENANTS]

    sync = task("sync-tenants", every=timedelta(minutes=5), catch_up="all", enqueue=fan_out)

The ``job=`` shorthand enqueues ``job.call(occurrence=<ISO-8601 UTC instant>, catch_up=<bool>)``
with ``idempotency_key=occurrence.key``; the function must accept those two keyword arguments.
``enqueue_in_fire=fn(occurrence, conn)`` is ``enqueue=`` for code that writes rows itself: ``conn``
is the connection of the scheduler's fire transaction, so what it writes commits with the fire
record and a duplicate fire rolls it back (celery_compat's beat sends its messages this way).

What it is not: the scheduler. Declaring a task starts nothing and registers nothing; the scheduler
service finds tasks with ``tasks_from_module`` and dedups fires on ``Occurrence.key``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import psycopg

from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.scheduling.cron import (
    CATCH_UP_POLICIES,
    DEFAULT_ANCHOR,
    CatchUp,
    CatchUpPolicy,
    CronSchedule,
    IntervalSchedule,
    Schedule,
    missed,
)
from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.job import EnqueueRequest, JobDefinition

EnqueueFn = Callable[["Occurrence"], Iterable[EnqueueRequest]]
# Given the connection of the fire's transaction (see ``enqueue_in_fire=`` in the docstring).
FireEnqueueFn = Callable[["Occurrence", psycopg.Connection[Any]], Iterable[EnqueueRequest]]
DEFAULT_MAX_CATCH_UP = 100


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One fire of a task: which task, the scheduled instant (UTC), and whether it is a catch-up.

    ``key`` (``"<task>@<ISO-8601 UTC instant>"``) is what the scheduler's unique index holds, so an
    occurrence is enqueued once however many schedulers race for it.
    """

    task: str
    at: datetime
    catch_up: bool

    def __post_init__(self) -> None:
        if not isinstance(self.at, datetime) or self.at.utcoffset() is None:
            raise ConfigError(
                f"occurrence instant {self.at!r} is not timezone-aware",
                hint="pass an aware datetime, e.g. datetime(2026, 3, 8, 7, tzinfo=UTC)",
            )
        object.__setattr__(self, "at", self.at.astimezone(UTC))

    @property
    def key(self) -> str:
        return f"{self.task}@{self.at.isoformat()}"


@dataclass(frozen=True, slots=True)
class Plan:
    """One round for one task: the occurrences to enqueue and the arithmetic behind them."""

    occurrences: tuple[Occurrence, ...]
    result: CatchUp


def _task_name(value: object) -> str:
    if not isinstance(value, str) or not validation.JOB_NAME_PATTERN.match(value):
        raise ConfigError(
            f"task name {value!r} is not allowed",
            hint="use 1-200 characters from A-Z a-z 0-9 _ . : - < > (e.g. 'nightly-report')",
            code=ErrorCode.JOB_NAME_INVALID,
        )
    return value


def _job_enqueue(definition: JobDefinition[Any, Any], task_name: str) -> EnqueueFn:
    try:
        inspect.signature(definition.fn).bind(occurrence="", catch_up=False)
    except TypeError as exc:
        raise ConfigError(
            f"task {task_name!r}: job {definition.name!r} cannot be called with "
            f"occurrence= and catch_up= ({exc})",
            hint="give the job the parameters (occurrence: str, catch_up: bool), or pass "
            "enqueue=fn returning [job.call(...)] to choose its arguments",
            code=ErrorCode.JOB_OPTION_INVALID,
        ) from exc

    def enqueue(occurrence: Occurrence) -> list[EnqueueRequest]:
        call = definition.configure(idempotency_key=occurrence.key)
        return [call.call(occurrence=occurrence.at.isoformat(), catch_up=occurrence.catch_up)]

    return enqueue


class PeriodicTask:
    """A declared periodic task; ``task(...)`` builds one (or construct it with any ``Schedule``)."""

    def __init__(
        self,
        name: str,
        schedule: Schedule,
        *,
        catch_up: CatchUpPolicy = "skip",
        max_catch_up: int = DEFAULT_MAX_CATCH_UP,
        enqueue: EnqueueFn | None = None,
        job: JobDefinition[Any, Any] | None = None,
        enqueue_in_fire: FireEnqueueFn | None = None,
    ) -> None:
        self.name = _task_name(name)
        if not callable(getattr(schedule, "next_after", None)):
            raise ConfigError(
                f"task {name!r}: {schedule!r} is not a schedule",
                hint="pass cron='...' or every=... to task(), or a CronSchedule/IntervalSchedule",
            )
        self.schedule = schedule
        if catch_up not in CATCH_UP_POLICIES:
            raise ConfigError(
                f"task {name!r}: catch_up={catch_up!r} is not a policy",
                hint=f"use one of {', '.join(repr(p) for p in CATCH_UP_POLICIES)}",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        self.catch_up: CatchUpPolicy = catch_up
        self.max_catch_up = validation.positive_int(
            f"task {name!r}: max_catch_up", max_catch_up, maximum=10_000
        )
        if sum(x is not None for x in (enqueue, job, enqueue_in_fire)) != 1:
            raise ConfigError(
                f"task {name!r} needs exactly one of enqueue= and job= (or enqueue_in_fire=)",
                hint="pass job=some_job (it receives occurrence= and catch_up=), or "
                "enqueue=fn(occurrence) returning a list of job.call(...) requests",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        if enqueue_in_fire is not None and not callable(enqueue_in_fire):
            raise ConfigError(
                f"task {name!r}: enqueue_in_fire={enqueue_in_fire!r} is not callable",
                hint="pass a function taking an Occurrence and a connection",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        if job is not None:
            if not isinstance(job, JobDefinition):
                raise ConfigError(
                    f"task {name!r}: job={job!r} is not a @job",
                    hint="decorate the function with @ujobs_bridge.job and pass that",
                    code=ErrorCode.JOB_OPTION_INVALID,
                )
            enqueue = _job_enqueue(job, self.name)
        elif enqueue_in_fire is None and not callable(enqueue):
            raise ConfigError(
                f"task {name!r}: enqueue={enqueue!r} is not callable",
                hint="pass a function taking an Occurrence and returning [job.call(...)]",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        self._enqueue: EnqueueFn | None = enqueue
        self._enqueue_in_fire = enqueue_in_fire
        self.job = job

    @property
    def sends_in_fire(self) -> bool:
        """True if its occurrences send through the fire's connection themselves (a Celery beat
        entry's ``apply_async``) instead of returning requests."""
        return self._enqueue_in_fire is not None

    def __repr__(self) -> str:
        return f"<task {self.name} {self.schedule.describe()} catch_up={self.catch_up}>"

    def requests(
        self, occurrence: Occurrence, conn: psycopg.Connection[Any] | None = None
    ) -> list[EnqueueRequest]:
        """The job requests for one occurrence (possibly none); anything else is refused.
        ``conn`` is the fire transaction's connection, handed to an ``enqueue_in_fire=``."""
        if self._enqueue_in_fire is not None:
            if conn is None:
                raise ConfigError(
                    f"task {self.name!r} enqueues inside the fire transaction: pass its connection",
                    hint="call requests(occurrence, conn) with the connection that records the fire",
                    code=ErrorCode.JOB_OPTION_INVALID,
                )
            produced = self._enqueue_in_fire(occurrence, conn)
        else:
            assert self._enqueue is not None
            produced = self._enqueue(occurrence)
        if isinstance(produced, EnqueueRequest) or not isinstance(produced, Iterable):
            raise ConfigError(
                f"task {self.name!r}: enqueue returned {produced!r}, not a list of requests",
                hint="return a list, e.g. [some_job.call(...)] (an empty list enqueues nothing)",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        out = list(produced)
        for item in out:
            if not isinstance(item, EnqueueRequest):
                raise ConfigError(
                    f"task {self.name!r}: enqueue returned {item!r} in its list",
                    hint="build each entry with some_job.call(...) or some_job.configure(...).call(...)",
                    code=ErrorCode.JOB_OPTION_INVALID,
                )
        return out

    def plan(
        self, watermark: datetime | None, now: datetime, *, grace: timedelta = timedelta(0)
    ) -> Plan:
        """What to fire for this round, per ``cron.missed`` under this task's policy."""
        result = missed(
            self.schedule, watermark, now, self.catch_up, self.max_catch_up, grace=grace
        )
        return Plan(tuple(Occurrence(self.name, f.at, f.catch_up) for f in result.fires), result)


def task(
    name: str,
    *,
    cron: str | None = None,
    every: timedelta | float | None = None,
    tz: str = "UTC",
    anchor: datetime | None = None,
    catch_up: CatchUpPolicy = "skip",
    max_catch_up: int = DEFAULT_MAX_CATCH_UP,
    enqueue: EnqueueFn | None = None,
    job: JobDefinition[Any, Any] | None = None,
    enqueue_in_fire: FireEnqueueFn | None = None,
) -> PeriodicTask:
    """Declare a periodic task: exactly one of ``cron=`` (with ``tz=``) and ``every=`` (with an
    optional ``anchor=``, see ``IntervalSchedule``). ``max_catch_up`` bounds ``catch_up="all"``
    per scheduler round. See the module docstring for ``enqueue=`` and ``job=``."""
    schedule: Schedule
    if (cron is None) == (every is None):
        raise ConfigError(
            f"task {name!r} needs exactly one of cron= and every=",
            hint="pass cron='0 2 * * *' (wall-clock times, with tz=) or every=timedelta(minutes=5)",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    if cron is not None:
        if anchor is not None:
            raise ConfigError(
                f"task {name!r}: anchor= applies to every= only",
                hint="drop anchor=, or use every= instead of cron=",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        schedule = CronSchedule(cron, tz)
    else:
        assert every is not None
        if tz != "UTC":
            raise ConfigError(
                f"task {name!r}: tz={tz!r} has no meaning for every=",
                hint="drop tz= (intervals are fixed lengths of real time), or use cron= with tz=",
                code=ErrorCode.JOB_OPTION_INVALID,
            )
        schedule = IntervalSchedule(every, anchor if anchor is not None else DEFAULT_ANCHOR)
    return PeriodicTask(
        name,
        schedule,
        catch_up=catch_up,
        max_catch_up=max_catch_up,
        enqueue=enqueue,
        job=job,
        enqueue_in_fire=enqueue_in_fire,
    )


def tasks_from_module(module: ModuleType) -> dict[str, PeriodicTask]:
    """The periodic tasks bound to names in ``module``; two tasks under one name are refused."""
    out: dict[str, PeriodicTask] = {}
    for value in vars(module).values():
        if not isinstance(value, PeriodicTask):
            continue
        other = out.get(value.name)
        if other is not None and other is not value:
            raise ConfigError(
                f"two periodic tasks in {module.__name__} are named {value.name!r}",
                hint="give one of them another name in its task(...)",
                code=ErrorCode.TASK_DUPLICATE,
            )
        out[value.name] = value
    return out
