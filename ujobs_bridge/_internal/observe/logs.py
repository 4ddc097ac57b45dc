"""How long-running commands log: one setup, two formats (``text`` for people, ``json`` for
log pipelines), and the fields every line about a job carries.

Why it exists: an operator's log pipeline needs one JSON object per line with the ids it can
join on (job id, name, attempt, the Celery task id where there is one, the W3C traceparent),
and a person reading a terminal needs the same facts in one sentence. Every long-running
command (worker, scheduler, outbox relay, ``migrate --follow``, dashboard) calls ``setup`` with
its ``--loglevel`` and ``--log-format``; code that logs about a job passes ``job_fields(...)``
as ``extra=`` so both formats carry them.

Every line goes through the one redaction (``redaction.py``): a password in a message, a
traceback or an ``extra=`` field is hidden.

What it is not: a logging framework. It configures the standard library's root logger and
formats records; it never decides what to log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from ujobs_bridge._internal.observe.redaction import redact, redact_message

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The `extra=` keys a job line may carry, in the order JSON lines print them.
JOB_KEYS = (
    "job_id",
    "job_name",
    "queue",
    "attempt",
    "max_attempts",
    "task_id",
    "traceparent",
    "outcome",
    "delay_s",
    "error",
)
# LogRecord's own attributes: anything else on a record came from `extra=`.
_RECORD_KEYS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def celery_task_id(value: Any) -> str | None:
    """The message id an enqueuer put in the input's ``headers.id`` (a Celery task message:
    its task id), or None. Read as plain data: the engine knows no Celery."""
    if isinstance(value, Mapping):
        headers = value.get("headers")
        if isinstance(headers, Mapping):
            task_id = headers.get("id")
            if isinstance(task_id, str) and task_id:
                return task_id
    return None


def job_fields(
    job_id: object,
    name: str,
    queue: str,
    attempt: int,
    max_attempts: int,
    *,
    input_value: Any = None,
    traceparent: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """The ``extra=`` of a log line about one attempt of one job."""
    fields: dict[str, Any] = {
        "job_id": str(job_id),
        "job_name": name,
        "queue": queue,
        "attempt": attempt,
        "max_attempts": max_attempts,
        "task_id": celery_task_id(input_value),
        "traceparent": traceparent,
    }
    fields.update(more)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``,
    then whatever ``extra=`` fields the record carries (the job keys first), then ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_message(record.getMessage()),
        }
        extras = {k: v for k, v in record.__dict__.items() if k not in _RECORD_KEYS}
        for key in JOB_KEYS:
            if key in extras:
                out[key] = redact(extras.pop(key))
        for key, value in extras.items():
            if not key.startswith("_"):
                out[key] = redact(value)
        if record.exc_info:
            out["exc"] = redact_message(self.formatException(record.exc_info))
        if record.stack_info:
            out["stack"] = redact_message(self.formatStack(record.stack_info))
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The classic text line, its secrets hidden (``redaction.py``) like JSON lines'."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_message(super().format(record))


def formatter(fmt: LogFormat) -> logging.Formatter:
    """JSON lines, or the classic one-line text (a job's traceback is in JSON's ``error``, and
    in text only at DEBUG, as its own line: ``worker/job_log.py``); both with their secrets
    hidden."""
    return JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT)


def setup(level: int | str, fmt: LogFormat = "text", logfile: str | None = None) -> None:
    """Route the root logger to stderr (or ``logfile``) at ``level``, in ``fmt``; replaces
    handlers an earlier setup installed."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    handler: logging.Handler = (
        logging.FileHandler(logfile, encoding="utf-8") if logfile else logging.StreamHandler()
    )
    handler.setFormatter(formatter(fmt))
    logging.basicConfig(level=level, handlers=[handler], force=True)
