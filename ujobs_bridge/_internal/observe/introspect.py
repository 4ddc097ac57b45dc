"""Read and steer jobs for operators: list, show, cancel, requeue, dead letters, stats, stranded,
and the live worker nodes (which processes run, and how many consume each queue).

Why it exists: the CLI and any dashboard need the same answers, with the same safety rules:
inputs and outputs are printed with secret-looking keys redacted unless asked
(``redaction.py``), and an operation on a job in the wrong state says what state it is in and
what to do instead.

What it is not: the worker's claim path. Nothing here takes a lease.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.config import plugins
from ujobs_bridge._internal.db import bulk, connections, observe
from ujobs_bridge._internal.db import job_reads as reads_db
from ujobs_bridge._internal.db import nodes as node_store
from ujobs_bridge._internal.db import steering as steering_db
from ujobs_bridge._internal.db import steps as step_store
from ujobs_bridge._internal.db import unclaimed as unclaimed_db
from ujobs_bridge._internal.db.nodes import NodeRecord
from ujobs_bridge._internal.db.observe import AttemptRow
from ujobs_bridge._internal.db.steps import StepRecord
from ujobs_bridge._internal.jobs.outcomes import FAILURE_KIND
from ujobs_bridge._internal.observe.redaction import redact, redact_message
from ujobs_bridge.errors import ConfigError, JobNotFoundError, JobStateError
from ujobs_bridge.records import LIVE_STATES, JobRecord, JobState, QueueStat

INTROSPECT_ROLE = connections.Role("introspect")


def parse_id(text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError as exc:
        raise ConfigError(
            f"{text!r} is not a job id", hint="pass the UUID shown by `ujobs-bridge jobs ls`"
        ) from exc


def name_pattern(glob: str | None) -> str | None:
    """A ``--name`` glob (``*`` any run, ``?`` one character; anything else literal) as a LIKE
    pattern; a name without wildcards matches only itself."""
    if glob is None:
        return None
    out = []
    for ch in glob:
        if ch == "*":
            out.append("%")
        elif ch == "?":
            out.append("_")
        else:
            out.append(reads_db.like_literal(ch))
    return "".join(out)


def lookup_ids(conn: psycopg.Connection[Any], text: str) -> list[UUID]:
    """The jobs another kind of id names (a Celery task id), asked of every installed
    ``ujobs_bridge.lookup`` plugin, in their order; none when nothing knows the id."""
    found: list[UUID] = []
    for _, lookup in plugins.load_all(plugins.LOOKUP_GROUP):
        for job_id in lookup(conn, text):
            if job_id not in found:
                found.append(job_id)
    return found


def parse_state(text: str | None) -> JobState | None:
    if text is None:
        return None
    try:
        return JobState(text)
    except ValueError as exc:
        names = ", ".join(s.value for s in JobState)
        raise ConfigError(f"{text!r} is not a job state", hint=f"use one of: {names}") from exc


def parse_shown_state(text: str | None) -> tuple[JobState | None, str | None]:
    """A state as the views show it: an engine state (``dead``: the dead letters), or a failure
    kind, a word in capitals (``FAILURE``: the dead rows a package ended with that kind)."""
    if text is not None and FAILURE_KIND.fullmatch(text):
        return JobState.DEAD, text
    try:
        return parse_state(text), None
    except ConfigError as exc:
        raise ConfigError(
            exc.message, hint=f"{exc.hint}, or a failure kind in capitals (FAILURE)"
        ) from exc


def attempt_text(record: JobRecord) -> str:
    """The attempt as the views show it: ``1/3`` (of the engine's attempts), but only ``1`` for
    a failure of a package's own kind, whose retries were the package's (none left here)."""
    if record.state is JobState.DEAD and record.failure_kind:
        return str(record.attempt)
    return f"{record.attempt}/{record.max_attempts}"


class Introspector:
    def __init__(self, dsn: str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.dsn = dsn
        self.clock = clock

    def _connect(self) -> psycopg.Connection[Any]:
        return connections.connect(self.dsn, INTROSPECT_ROLE)

    def get(self, job_id: UUID) -> JobRecord:
        with self._connect() as conn:
            record = reads_db.job_get(conn, job_id)
        if record is None:
            raise JobNotFoundError(
                f"no job {job_id}", hint="check the id with `ujobs-bridge jobs ls`"
            )
        return record

    def find(self, text: str) -> list[JobRecord]:
        """The job ``text`` names: a job id, else the jobs of a Celery task id (newest message
        first). Raises ``JobNotFoundError`` when nothing matches."""
        with self._connect() as conn:
            try:
                record = reads_db.job_get(conn, UUID(text))
            except ValueError:
                record = None
            if record is not None:
                return [record]
            ids = lookup_ids(conn, text)
            records = [r for r in (reads_db.job_get(conn, i) for i in ids) if r is not None]
        if not records:
            shown = text[:200] if text[:200].isprintable() else repr(text[:200])  # no control
            raise JobNotFoundError(
                f"no job {shown}: neither a job id nor a known Celery task id",
                hint="check the id with `ujobs-bridge jobs ls`",
            )
        return records

    def task_job_ids(self, task_id: str) -> list[UUID]:
        with self._connect() as conn:
            return lookup_ids(conn, task_id)

    def steps(self, job_id: UUID) -> list[StepRecord]:
        with self._connect() as conn:
            return step_store.step_list(conn, job_id)

    def attempts(self, job_id: UUID) -> list[AttemptRow]:
        """The job's attempts that ended, oldest first (migration 0016 on)."""
        with self._connect() as conn:
            return observe.observe_attempts(conn, job_id)

    def jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        name: str | None = None,
        task_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        kind: str | None = None,
    ) -> list[JobRecord]:
        """Newest first; ``name`` is a glob, ``task_id`` a Celery task id; state ``dead`` with
        ``kind`` lists the dead rows of that failure kind, without it the dead letters."""
        with self._connect() as conn:
            ids = lookup_ids(conn, task_id) if task_id is not None else None
            return reads_db.job_list(
                conn,
                state=state.value if state else None,
                queue=queue,
                name=None,
                name_like=name_pattern(name),
                ids=ids,
                limit=limit,
                offset=offset,
                kind=kind,
            )

    def dead(
        self, *, limit: int = 50, offset: int = 0, queue: str | None = None, name: str | None = None
    ) -> list[JobRecord]:
        with self._connect() as conn:
            return reads_db.job_dead(
                conn, limit=limit, offset=offset, queue=queue, name_like=name_pattern(name)
            )

    def count_matching(self, where: bulk.JobFilter, states: tuple[str, ...]) -> int:
        with self._connect() as conn:
            return bulk.job_count_matching(conn, where, states)

    def cancel_matching(
        self, where: bulk.JobFilter, *, reason: str = "cancelled by an operator"
    ) -> int:
        with self._connect() as conn:
            return bulk.job_cancel_matching(conn, where, f"UJ_JOB_CANCELLED: {reason}")

    def requeue_matching(self, where: bulk.JobFilter) -> int:
        with self._connect() as conn:
            return bulk.job_requeue_matching(conn, where, self.clock.sql_now())

    def stats(self) -> list[QueueStat]:
        with self._connect() as conn:
            return reads_db.job_stats(conn)

    def stranded(self, *, after_s: float) -> list[unclaimed_db.NameBacklog]:
        """Claimable jobs due for at least ``after_s`` seconds and still not claimed, per queue,
        state and name. What it cannot tell: whether any worker declares the name (a registry
        lives in each worker's process); only that none has taken the job for that long."""
        with self._connect() as conn:
            return unclaimed_db.job_stranded(conn, after_s=after_s, now=self.clock.sql_now())

    def nodes(self) -> list[NodeRecord]:
        """The live worker nodes (one per worker process; expired ones are not listed)."""
        with self._connect() as conn:
            return node_store.nodes_live(conn, self.clock.sql_now())

    def workers_per_queue(self) -> dict[str, int]:
        """Live worker processes per consumed queue; a queue nobody consumes is absent."""
        with self._connect() as conn:
            return node_store.nodes_per_queue(conn, self.clock.sql_now())

    def cancel(self, job_id: UUID, *, reason: str = "cancelled by an operator") -> JobRecord:
        with self._connect() as conn:
            if not steering_db.job_cancel(conn, job_id, f"UJ_JOB_CANCELLED: {reason}"):
                record = reads_db.job_get(conn, job_id)
                if record is None:
                    raise JobNotFoundError(
                        f"no job {job_id}", hint="check the id with `ujobs-bridge jobs ls`"
                    )
                raise JobStateError(
                    f"job {job_id} is {record.state.value}; only live jobs ({', '.join(sorted(s.value for s in LIVE_STATES))}) can be cancelled",
                    hint="nothing to do: it already finished"
                    if record.state is not JobState.CANCELLED
                    else "it is already cancelled",
                )
            record = reads_db.job_get(conn, job_id)
            assert record is not None
            return record

    def requeue(self, job_id: UUID) -> JobRecord:
        with self._connect() as conn:
            try:
                ok = steering_db.job_requeue(conn, job_id, self.clock.sql_now())
            except psycopg.errors.UniqueViolation as exc:
                raise JobStateError(
                    f"job {job_id} cannot be requeued: another live job holds its idempotency key",
                    hint="wait for that job to finish, or cancel it first",
                ) from exc
            if not ok:
                record = reads_db.job_get(conn, job_id)
                if record is None:
                    raise JobNotFoundError(
                        f"no job {job_id}", hint="check the id with `ujobs-bridge jobs ls`"
                    )
                raise JobStateError(
                    f"job {job_id} is {record.state.value}; only dead or cancelled jobs can be requeued",
                    hint="a live job will run on its own; enqueue a new job to run a done one again",
                )
            record = reads_db.job_get(conn, job_id)
            assert record is not None
            return record


def suspended_reason(record: JobRecord, steps: list[StepRecord]) -> str | None:
    """Why a parked job is not running: what it sleeps until or waits for."""
    if record.state is JobState.SLEEPING:
        return f"sleeping until {record.run_at.isoformat(timespec='seconds')}"
    if record.state is JobState.WAITING:
        waiting = next((s for s in steps if s.status == "waiting"), None)
        if waiting is None:
            return "waiting"
        until = (
            "no timeout"
            if record.run_at.year >= 9999
            else f"timeout at {record.run_at.isoformat(timespec='seconds')}"
        )
        return f"waiting for event {waiting.event!r} key {waiting.correlation_key!r} ({until})"
    return None


def step_json(step: StepRecord, show_input: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in step.__slots__:
        value = getattr(step, key)
        out[key] = value.isoformat() if hasattr(value, "isoformat") else value
    if not show_input:
        out["output"] = redact(out["output"])
        if isinstance(out.get("error"), str):
            out["error"] = redact_message(out["error"])
    return out
