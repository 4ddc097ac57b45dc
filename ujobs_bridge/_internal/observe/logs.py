"""How long-running commands log: one setup, two formats (``text`` for people, ``json`` for
log pipelines), and the fields every line about a job carries.

Why it exists: an operator's log pipeline needs one JSON object per line with the ids it can
join on (job id, name, attempt, the Celery task id where there is one, the W3C traceparent),
and a person reading a terminal needs the same facts in one sentence. Every long-running
command (worker, scheduler, outbox relay, ``migrate --follow``, dashboard) calls ``setup`` with
its ``--loglevel`` and ``--log-format``; code that logs about a job passes ``job_fields(...)``
as ``extra=`` so both formats carry them. A command's own status lines (``database: ...``,
``worker ... ready``, ``worker: shutting down``, ``worker stopped: ...``) go through ``say``:
plain text for people, and under ``--log-format json`` one JSON object like every log line (as
do Python's warnings), so a log shipper reading stderr never meets a line it cannot parse.
Under ``--log-format json`` whatever else reaches stdout or stderr is a JSON object too
(``redirect_lines``): a task body's ``print()`` is logged by ``ujobs_bridge.redirected`` at
WARNING, as Celery's worker logs it by ``celery.redirected`` (``worker_redirect_stdouts``), and
click's own lines (a usage error, ``--help``) are said as they come.

Every line goes through the one redaction (``redaction.py``): a password in a message, a
traceback or an ``extra=`` field is hidden.

What it is not: a logging framework. It configures the standard library's root logger and
formats records; it never decides what to log.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
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


class _Chosen:
    """What ``setup`` chose last (``say`` follows its format; a pool child repeats it)."""

    format: LogFormat = "text"
    setup: tuple[int | str, LogFormat, str | None] | None = None
    logging_ready = False  # setup installed a handler: redirected lines are log records


REDIRECTED_LOGGER = "ujobs_bridge.redirected"
REDIRECTED_LEVEL = "WARNING"  # Celery's worker_redirect_stdouts_level


class RedirectedLines(io.TextIOBase):
    """Stands in for ``sys.stdout``/``sys.stderr`` under JSON lines: every line written is one
    JSON object. Once ``setup`` has run, a line is a log record of ``ujobs_bridge.redirected``
    at WARNING (a body's ``print()``, as Celery's worker logs it), formatted and written where
    every log line goes; before that (click parsing the command line), it is ``say``-ed on the
    stream it replaced. A line written while one is being written (a handler failing and
    printing) goes to that stream as it is, never round again."""

    def __init__(self, stream: Any, *, level: str) -> None:
        super().__init__()
        self.stream = stream
        self.level = level
        self._pending = ""
        self._busy = threading.local()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.stream, "encoding", None) or "utf-8")

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return int(self.stream.fileno())

    def write(self, text: str, /) -> int:
        if getattr(self._busy, "on", False):
            self.stream.write(text)
            return len(text)
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        if self._pending and not getattr(self._busy, "on", False):
            line, self._pending = self._pending, ""
            self._emit(line)
        self.stream.flush()

    def _emit(self, line: str) -> None:
        line = line.rstrip("\r")
        if not line.strip():
            return
        self._busy.on = True
        try:
            if _Chosen.logging_ready:
                logging.getLogger(REDIRECTED_LOGGER).log(
                    logging.getLevelName(REDIRECTED_LEVEL), line
                )
            else:
                say(line, level=self.level, stream=self.stream)
        finally:
            self._busy.on = False


def unwrapped(stream: Any) -> Any:
    """The stream a ``RedirectedLines`` stands in for (the stream itself otherwise)."""
    return stream.stream if isinstance(stream, RedirectedLines) else stream


def redirect_lines() -> None:
    """Every line on stdout and stderr one JSON object from now on (see ``RedirectedLines``);
    ``say`` and the log handler write to the streams replaced. Called again, it does nothing."""
    _Chosen.format = "json"
    if not isinstance(sys.stdout, RedirectedLines) and sys.stdout is not None:
        sys.stdout = RedirectedLines(sys.stdout, level="INFO")
    if not isinstance(sys.stderr, RedirectedLines) and sys.stderr is not None:
        sys.stderr = RedirectedLines(sys.stderr, level="WARNING")


def snapshot() -> tuple[LogFormat, bool]:
    """What ``restore`` puts back: a command run in this process (as a test runs one) leaves
    the process's output as it found it."""
    return _Chosen.format, _Chosen.logging_ready


def restore(saved: tuple[LogFormat, bool]) -> None:
    restore_lines()
    _Chosen.format, _Chosen.logging_ready = saved


def restore_lines() -> None:
    """Undo ``redirect_lines``."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, RedirectedLines):
            stream.flush()
            setattr(sys, name, stream.stream)


def chosen() -> tuple[int | str, LogFormat, str | None] | None:
    """``setup``'s arguments in this process, if it was called: a spawned pool child passes them
    to ``setup`` so its lines (a body's log, a warning) are in the worker's format."""
    return _Chosen.setup


def json_chosen() -> bool:
    """Did ``setup`` choose JSON lines?"""
    return _Chosen.format == "json"


def say(
    text: str,
    *,
    level: str = "INFO",
    logger: str = "ujobs_bridge.cli",
    stream: Any = None,
    **fields: Any,
) -> None:
    """A command's status line on stderr (or ``stream``), whatever the log level: ``text`` as it
    is, or under ``--log-format json`` one JSON object (``ts``, ``level``, ``logger``,
    ``message``, then ``fields``, which the text form leaves out). Secrets in ``text`` are
    hidden either way."""
    text = redact_message(text)
    if _Chosen.format == "json":
        record = logging.makeLogRecord(
            {"name": logger, "levelname": level, "levelno": logging.getLevelName(level), **fields}
        )
        record.msg = text
        text = JsonFormatter().format(record)
    out = unwrapped(stream if stream is not None else sys.stderr)
    out.write(text + "\n")
    out.flush()


class SaidLines(io.StringIO):
    """A text stream whose every line is ``say``-ed: what a command prints with a console
    (rich) becomes one JSON object per line under ``--log-format json``."""

    def __init__(self, logger: str = "ujobs_bridge.cli") -> None:
        super().__init__()
        self.logger = logger
        self._pending = ""

    def write(self, text: str, /) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            if line.strip():
                say(line.rstrip(), logger=self.logger)
        return len(text)

    def flush(self) -> None:
        if self._pending.strip():
            say(self._pending.rstrip(), logger=self.logger)
        self._pending = ""

    def isatty(self) -> bool:
        return False


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
        logging.FileHandler(logfile, encoding="utf-8")
        if logfile
        else logging.StreamHandler(unwrapped(sys.stderr))
    )
    handler.setFormatter(formatter(fmt))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    _Chosen.format = fmt
    _Chosen.setup = (level, fmt, logfile)
    _Chosen.logging_ready = True
    logging.captureWarnings(fmt == "json")  # a warning is a log line too (py.warnings)
    if fmt == "json":
        redirect_lines()  # a body's print(), or anything else written, is a JSON line too
    else:
        restore_lines()
