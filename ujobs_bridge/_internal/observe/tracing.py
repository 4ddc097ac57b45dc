"""OpenTelemetry, when it is installed: enqueue records the current trace context in the row's
``traceparent``, and each attempt runs in a consumer span whose parent is that context.

Why it exists: a request that enqueues a job and the worker that runs it, minutes later on
another machine, should be one trace. The W3C ``traceparent`` column carries the link (as a
Celery message's header does); the span follows OpenTelemetry's messaging conventions
(``process <queue>``, kind CONSUMER, ``messaging.*`` attributes). The ``tracing`` extra
installs ``opentelemetry-api``; without it (or with it but no SDK configured) nothing changes:
no column is written, no span is made, and the cost is one ``None`` check.

What it is not: an SDK setup. The application configures its tracer provider and exporter as it
does for the rest of its code; the worker only asks the API for a tracer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ujobs_bridge.records import ClaimedJob

try:  # optional: the `tracing` extra
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by a subprocess test without it
    trace = None  # type: ignore[assignment]

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
    if trace is None:
        yield _nothing
        return
    parent = (
        _propagator.extract({"traceparent": claimed.traceparent})
        if claimed.traceparent
        else otel_context.Context()  # a root span: not the worker's own ambient context
    )
    tracer = trace.get_tracer(TRACER_NAME)
    attributes: dict[str, Any] = {
        "messaging.system": "ujobs_bridge",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": claimed.queue,
        "messaging.message.id": str(claimed.id),
        "ujobs.job.name": claimed.name,
        "ujobs.job.attempt": claimed.attempt,
        "ujobs.job.max_attempts": claimed.max_attempts,
    }
    with tracer.start_as_current_span(
        f"process {claimed.queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:

        def record(error: BaseException | None, failed: bool) -> None:
            if error is not None and failed:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))

        yield record
