"""What an upper package shows through the engine: its Prometheus registry and endpoint, the
health check's database probe, log setup, the trace context, redaction and the introspector.

What it is not: the dashboard (``ujobs_bridge.ext.dashboard``: it needs the ``dashboard`` extra,
and a module every send imports must not) or the engine's own metrics families.
"""

from __future__ import annotations

from ujobs_bridge._internal.observe.health import database_reachable
from ujobs_bridge._internal.observe.introspect import Introspector
from ujobs_bridge._internal.observe.logs import LogFormat
from ujobs_bridge._internal.observe.logs import setup as setup_logs
from ujobs_bridge._internal.observe.metrics import REGISTRY
from ujobs_bridge._internal.observe.metrics_http import MetricsServer
from ujobs_bridge._internal.observe.redaction import (
    add_secret_keys,
    redact,
    redact_message,
    redact_repr,
    redact_text,
)
from ujobs_bridge._internal.observe.tracing import current_traceparent

__all__ = [
    "REGISTRY",
    "Introspector",
    "LogFormat",
    "MetricsServer",
    "add_secret_keys",
    "current_traceparent",
    "database_reachable",
    "redact",
    "redact_message",
    "redact_repr",
    "redact_text",
    "setup_logs",
]
