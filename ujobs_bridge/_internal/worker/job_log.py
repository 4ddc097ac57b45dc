"""The log line each attempt leaves: claimed/finished at DEBUG, a retry or a cancel at WARNING, a
dead letter at ERROR, each with the job's ids (``logs.job_fields``).

Why it exists: a plain ``@job`` that fails, retries or dead-letters used to log nothing, so an
operator saw failures only in the exit line's counts. The in-flight table calls ``settled`` from
the one place an attempt is settled, so every way an attempt ends is logged exactly once.

What it is not: the decision of the outcome (``attempt.py``) or its write (``outcome_batch.py``);
a line says what the worker decided, and a write fenced later is logged where it is counted.
"""

from __future__ import annotations

import logging

from ujobs_bridge._internal.observe.logs import job_fields
from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.records import ClaimedJob, JobState, Settlement

log = logging.getLogger("ujobs.job")


def outcome_of(settlement: Settlement) -> str:
    """One word for how an attempt ended: done, retried, dead, cancelled, snoozed, suspended,
    handed_back, or the failure kind a body ended with (``Fail``: FAILURE)."""
    if settlement.state is JobState.DONE:
        return "done"
    if settlement.state is JobState.DEAD:
        return settlement.failure_kind or "dead"
    if settlement.state is JobState.CANCELLED:
        return "cancelled"
    if settlement.state in (JobState.SLEEPING, JobState.WAITING):
        return "suspended"
    if settlement.uncount:
        snoozed = (settlement.error or "").startswith(ErrorCode.JOB_SNOOZED.value)
        return "snoozed" if snoozed else "handed_back"
    return "retried"


def _fields(claimed: ClaimedJob, **more: object) -> dict[str, object]:
    return job_fields(
        claimed.id,
        claimed.name,
        claimed.queue,
        claimed.attempt,
        claimed.max_attempts,
        input_value=claimed.input,
        traceparent=claimed.traceparent,
        **more,
    )


def _label(claimed: ClaimedJob) -> str:
    return f"{claimed.name}[{claimed.id}] attempt {claimed.attempt}/{claimed.max_attempts}"


def _summary(error: str | None) -> str:
    """The last line of a traceback: the exception and its message."""
    lines = [line for line in (error or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no error text)"


def started(claimed: ClaimedJob) -> None:
    if log.isEnabledFor(logging.DEBUG):
        log.debug("job claimed: %s", _label(claimed), extra=_fields(claimed, outcome="claimed"))


def settled(claimed: ClaimedJob, settlement: Settlement | None) -> None:
    """Log how this attempt ended (``None``: the lease was gone, nothing to write)."""
    if settlement is None:
        log.info(
            "job let go: %s (its lease was lost or it was cancelled)",
            _label(claimed),
            extra=_fields(claimed, outcome="released"),
        )
        return
    outcome = outcome_of(settlement)
    if outcome == "retried":
        log.warning(
            "job failed, retry in %.1fs: %s: %s",
            settlement.delay_s,
            _label(claimed),
            _summary(settlement.error),
            extra=_fields(
                claimed, outcome=outcome, delay_s=settlement.delay_s, error=settlement.error
            ),
        )
    elif settlement.failure_kind and settlement.state is JobState.DEAD:
        log.error(
            "job %s: %s[%s] attempt %d: %s",
            settlement.failure_kind,
            claimed.name,
            claimed.id,
            claimed.attempt,
            _summary(settlement.error),
            extra=_fields(claimed, outcome=outcome, error=settlement.error),
        )
    elif outcome == "dead":
        log.error(
            "job dead: %s: %s",
            _label(claimed),
            _summary(settlement.error),
            extra=_fields(claimed, outcome=outcome, error=settlement.error),
        )
    elif outcome == "cancelled":
        log.warning(
            "job cancelled: %s: %s",
            _label(claimed),
            _summary(settlement.error),
            extra=_fields(claimed, outcome=outcome, error=settlement.error),
        )
    if outcome in ("retried", "dead", "cancelled") and log.isEnabledFor(logging.DEBUG):
        log.debug("job traceback: %s:\n%s", _label(claimed), settlement.error or "")
    if outcome in ("snoozed", "handed_back"):
        log.info(
            "job %s: %s: %s",
            outcome.replace("_", " "),
            _label(claimed),
            _summary(settlement.error),
            extra=_fields(claimed, outcome=outcome, delay_s=settlement.delay_s),
        )
    elif outcome not in ("retried", "dead", "cancelled") and log.isEnabledFor(logging.DEBUG):
        log.debug("job %s: %s", outcome, _label(claimed), extra=_fields(claimed, outcome=outcome))
