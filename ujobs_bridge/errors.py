"""One error root for ujobs-bridge, with stable codes and a hint that says what to do.

Why it exists: operators grep logs and scripts match on codes, so every failure the library
raises on purpose carries a code that never changes (``UJ_<SUBJECT>_<PROBLEM>``), a message that
says what happened and a hint that names the fix. Control-flow signals (an attempt aborted by
cancellation, lease loss or a drain) derive from ``BaseException`` so that a job body's
``except Exception:`` cannot swallow them.

What it is not: a wrapper for every psycopg error. Driver errors propagate as they are unless we
have something better to say.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Stable codes. Add new members; never rename or reuse one."""

    CONFIG_INVALID = "UJ_CONFIG_INVALID"
    QUEUE_NAME_INVALID = "UJ_QUEUE_NAME_INVALID"
    JOB_NAME_INVALID = "UJ_JOB_NAME_INVALID"
    JOB_DUPLICATE = "UJ_JOB_DUPLICATE"
    JOB_OPTION_INVALID = "UJ_JOB_OPTION_INVALID"
    PAYLOAD_NOT_JSON = "UJ_PAYLOAD_NOT_JSON"
    JOB_NOT_FOUND = "UJ_JOB_NOT_FOUND"
    JOB_STATE_CONFLICT = "UJ_JOB_STATE_CONFLICT"
    APP_NOT_FOUND = "UJ_APP_NOT_FOUND"
    SCHEMA_OUTDATED = "UJ_SCHEMA_OUTDATED"
    SCHEMA_NEWER = "UJ_SCHEMA_NEWER"
    SCHEMA_PRIVILEGE = "UJ_SCHEMA_PRIVILEGE"
    ROLE_NOT_FOUND = "UJ_ROLE_NOT_FOUND"
    ROLE_IS_OWNER = "UJ_ROLE_IS_OWNER"
    MIGRATION_INVALID = "UJ_MIGRATION_INVALID"
    SCHEMA_PART_UNKNOWN = "UJ_SCHEMA_PART_UNKNOWN"
    SCHEMA_DUMP_FAILED = "UJ_SCHEMA_DUMP_FAILED"
    DATABASE_UNAVAILABLE = "UJ_DATABASE_UNAVAILABLE"
    EMBEDDED_FAILED = "UJ_EMBEDDED_FAILED"
    LEASE_LOST = "UJ_LEASE_LOST"
    JOB_CANCELLED = "UJ_JOB_CANCELLED"
    JOB_TIMEOUT = "UJ_JOB_TIMEOUT"
    JOB_EXPIRED = "UJ_JOB_EXPIRED"
    WORKER_DRAINING = "UJ_WORKER_DRAINING"
    WORKER_LOST = "UJ_WORKER_LOST"
    STEP_DUPLICATE = "UJ_STEP_DUPLICATE"
    STEP_NAME_INVALID = "UJ_STEP_NAME_INVALID"
    STEP_OUTSIDE_JOB = "UJ_STEP_OUTSIDE_JOB"
    NONDETERMINISM = "UJ_NONDETERMINISM"
    EVENT_TIMEOUT = "UJ_EVENT_TIMEOUT"
    JOB_DISCARDED = "UJ_JOB_DISCARDED"
    JOB_SNOOZED = "UJ_JOB_SNOOZED"
    SCHEDULE_INVALID = "UJ_SCHEDULE_INVALID"
    TASK_DUPLICATE = "UJ_TASK_DUPLICATE"
    PURGE_TARGET_DUPLICATE = "UJ_PURGE_TARGET_DUPLICATE"
    BROKER_DISCOVERY_FAILED = "UJ_BROKER_DISCOVERY_FAILED"
    TASK_UNREGISTERED = "UJ_TASK_UNREGISTERED"
    DSN_INVALID = "UJ_DSN_INVALID"
    BROKER_URL_INVALID = "UJ_BROKER_URL_INVALID"
    BROKER_UNAVAILABLE = "UJ_BROKER_UNAVAILABLE"
    PAYLOAD_TEXT_INVALID = "UJ_PAYLOAD_TEXT_INVALID"
    PAYLOAD_TOO_DEEP = "UJ_PAYLOAD_TOO_DEEP"
    PAYLOAD_KEY_INVALID = "UJ_PAYLOAD_KEY_INVALID"
    OUTPUT_TOO_LARGE = "UJ_OUTPUT_TOO_LARGE"
    OUTPUT_REJECTED = "UJ_OUTPUT_REJECTED"
    PAYLOAD_UNDECODABLE = "UJ_PAYLOAD_UNDECODABLE"
    WORKER_FAILED = "UJ_WORKER_FAILED"
    WORKER_HUNG = "UJ_WORKER_HUNG"
    CONTROL_COMMAND_UNKNOWN = "UJ_CONTROL_COMMAND_UNKNOWN"
    CONTROL_REFUSED = "UJ_CONTROL_REFUSED"
    CONTROL_FAILED = "UJ_CONTROL_FAILED"
    PGBOUNCER_UNDECLARED = "UJ_PGBOUNCER_UNDECLARED"
    DASHBOARD_CREDENTIALS_INVALID = "UJ_DASHBOARD_CREDENTIALS_INVALID"
    SEND_COMMIT_IN_TRANSACTION = "UJ_SEND_COMMIT_IN_TRANSACTION"


class UjobsError(Exception):
    """Root of every error ujobs-bridge raises on purpose."""

    code: ErrorCode = ErrorCode.CONFIG_INVALID

    def __init__(self, message: str, *, hint: str = "", code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        text = f"[{self.code.value}] {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class ConfigError(UjobsError):
    """A setting, flag or option is invalid. Refused, never clamped."""

    code = ErrorCode.CONFIG_INVALID


class ScheduleError(ConfigError):
    """A cron expression, time zone or interval cannot be a schedule."""

    code = ErrorCode.SCHEDULE_INVALID


class PayloadError(UjobsError):
    """A job payload or result cannot be stored as JSON."""

    code = ErrorCode.PAYLOAD_NOT_JSON


class ControlError(UjobsError):
    """A worker's remote-control command was refused (``UJ_CONTROL_REFUSED``), is not one the
    worker has (``UJ_CONTROL_COMMAND_UNKNOWN``) or failed (``UJ_CONTROL_FAILED``); the caller
    receives it as the reply ``{"error": {"code", "message", "hint"}}``."""

    code = ErrorCode.CONTROL_REFUSED


class JobNotFoundError(UjobsError):
    code = ErrorCode.JOB_NOT_FOUND


class JobStateError(UjobsError):
    """The job exists but is not in a state that allows the operation."""

    code = ErrorCode.JOB_STATE_CONFLICT


class SchemaError(UjobsError):
    code = ErrorCode.SCHEMA_OUTDATED


class DatabaseUnavailableError(UjobsError):
    """The jobs database could not be reached (down, restarting, the connection lost). Raised
    from a body (a step write, a result write), the attempt is handed back uncounted: the
    outage is not the job's fault."""

    code = ErrorCode.DATABASE_UNAVAILABLE


class StepError(UjobsError):
    """A step was used in a way that cannot be replayed safely; the job is dead-lettered, since
    retrying the same code cannot fix it."""

    code = ErrorCode.STEP_DUPLICATE


class EventTimeoutError(UjobsError):
    """``step.wait_for_event`` reached its timeout before a matching event arrived."""

    code = ErrorCode.EVENT_TIMEOUT


class StepSuspended(BaseException):
    """Raised by ``step.sleep`` / ``step.wait_for_event`` to park the job; the worker releases
    the slot and the lease. A body must let it propagate."""

    def __init__(self, state: str, wake_at: object, reason: str) -> None:
        self.state = state
        self.wake_at = wake_at
        self.reason = reason
        super().__init__(reason)


class AttemptAborted(BaseException):
    """Raised inside a job body when its attempt must stop: cancelled, lease lost, timed out or
    drained. Derives from BaseException so ``except Exception`` in user code does not hide it."""

    def __init__(self, code: ErrorCode, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"[{code.value}] {reason}")
