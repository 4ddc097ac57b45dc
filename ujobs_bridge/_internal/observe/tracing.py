"""OpenTelemetry, when it is installed: enqueue records the current trace context in the row's
``traceparent``, and each attempt runs in a consumer span whose parent is that context.

Why it exists: a request that enqueues a job and the worker that runs it, minutes later on
another machine, should be one trace. The W3C ``traceparent`` column carries the link (as a
Celery message's header does); the span follows OpenTelemetry's messaging conventions
(``process <queue>``, kind CONSUMER, ``messaging.*`` attributes). The ``tracing`` extra
installs ``opentelemetry-api``; without it (or with it but no SDK configured) nothing changes:
no column is written, no span is made, and the cost is one check per attempt (the API's proxy
provider, which stands in until an application sets its own, would only make spans that record
nothing, at a cost every job would pay: its context extracted and attached, its attributes
built).

An observer never fails an attempt: starting or ending the span, recording the exception and
setting the status all run code that is not ours (the SDK, its span processors, the exception's
own ``__str__`` and traceback), so each is guarded; what fails there is logged and the attempt
goes on as if there were no span.

What it is not: an SDK setup. The application configures its tracer provider and exporter as it
does for the rest of its code; the worker only asks the API for a tracer.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ujobs_bridge._internal.jobs.error_text import describe, error_text
from ujobs_bridge._internal.observe.redaction import redact_message
from ujobs_bridge.records import ClaimedJob

try:  # optional: the `tracing` extra
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by a subprocess test without it
    trace = None  # type: ignore[assignment]

log = logging.getLogger("ujobs.tracing")
TRACER_NAME = "ujobs_bridge"
_propagator: Any = TraceContextTextMapPropagator() if trace is not None else None

Record = Callable[[BaseException | None, bool], None]


def _nothing(error: BaseException | None, failed: bool) -> None:
    return None


def available() -> bool:
    return trace is not None


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, or None (no OpenTelemetry, no valid span)."""
    if trace is None:
        return None
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def attempt_span(claimed: ClaimedJob) -> Iterator[Record]:
    """The span of one attempt (``process <queue>``, a child of the enqueuer's context when the
    row has one); yields ``record(error, failed)`` to mark how the attempt ended."""
    if trace is None or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        yield _nothing  # no OpenTelemetry, or no SDK configured: every span would be a no-op
        return
    try:
        parent = (
            _propagator.extract({"traceparent": claimed.traceparent})
            if claimed.traceparent
            else otel_context.Context()  # a root span: not the worker's own ambient context
        )
        span_cm = trace.get_tracer(TRACER_NAME).start_as_current_span(
            f"process {claimed.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=_attributes(claimed),
            record_exception=False,
            set_status_on_exception=False,
        )
        span = span_cm.__enter__()
    except Exception as exc:  # the SDK or a span processor: the attempt runs without a span
        _failed("start the attempt's span", exc)
        yield _nothing
        return

    def record(error: BaseException | None, failed: bool) -> None:
        if error is not None and failed:
            _record_error(span, error)

    try:
        yield record
    finally:
        try:
            span_cm.__exit__(None, None, None)
        except Exception as exc:
            _failed("end the attempt's span", exc)


def _attributes(claimed: ClaimedJob) -> dict[str, Any]:
    return {
        "messaging.system": "ujobs_bridge",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": claimed.queue,
        "messaging.message.id": str(claimed.id),
        "ujobs.job.name": claimed.name,
        "ujobs.job.attempt": claimed.attempt,
        "ujobs.job.max_attempts": claimed.max_attempts,
    }


def _record_error(span: Any, error: BaseException) -> None:
    """The exception event (as the SDK's ``record_exception`` writes it: type, message,
    stacktrace, with their secrets hidden by ``redaction.py``) and the ERROR status. Formatting
    runs the body's own code: what cannot be formatted is named ``<unprintable ValueError>``."""
    try:
        span.add_event(
            "exception",
            {
                "exception.type": f"{type(error).__module__}.{type(error).__qualname__}",
                "exception.message": redact_message(describe(error).partition(": ")[2]),
                "exception.stacktrace": redact_message(error_text(error)),
                "exception.escaped": "False",
            },
        )
    except Exception as exc:
        _failed("record the attempt's exception", exc)
    try:
        span.set_status(Status(StatusCode.ERROR, redact_message(describe(error))))
    except Exception as exc:
        _failed("set the attempt span's status", exc)


def _failed(what: str, exc: BaseException) -> None:
    with contextlib.suppress(Exception):  # a logging filter that raises: the attempt goes on
        log.warning("ujobs.tracing.failed: could not %s: %s", what, describe(exc))
