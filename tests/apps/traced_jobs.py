"""Jobs for the ``-P processes`` tracing test (``tests/test_tracing_procs.py``): the module sets up
its OpenTelemetry SDK at import, as an application does for the rest of its code, so every
process that imports it (the worker, and each pool child, which imports ``-A`` afresh) traces
into the JSON-lines file named by ``$TRACED_SPANS_FILE``, one line per finished span with the
process id that made it: at once, or (``$TRACED_BATCH``) batched as in production, exported
only when the process flushes at its exit."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from ujobs_bridge import job

QUEUE = "traced"


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to a file: a line is written whole, by one process at once."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            context = span.get_span_context()
            assert context is not None
            line = {
                "pid": os.getpid(),
                "name": span.name,
                "trace_id": f"{context.trace_id:032x}",
                "span_id": f"{context.span_id:016x}",
                "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
                "attributes": dict(span.attributes or {}),
                "status": span.status.status_code.name,
            }
            with open(self.path, "a") as out:
                out.write(json.dumps(line, default=str) + "\n")
        return SpanExportResult.SUCCESS


if os.environ.get("TRACED_SPANS_FILE"):
    exporter = JsonLinesExporter(os.environ["TRACED_SPANS_FILE"])
    provider = TracerProvider()
    if os.environ.get("TRACED_BATCH"):  # what production uses: exported later, in a thread
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


@job(queue=QUEUE)
def where(x: int) -> dict[str, int]:
    """Which process ran the body."""
    return {"x": x, "pid": os.getpid()}


@job(queue=QUEUE, max_attempts=1)
def fails() -> None:
    raise RuntimeError("traced failure")
