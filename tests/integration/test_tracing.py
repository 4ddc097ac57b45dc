"""Traces: a job enqueued inside a span carries that trace in its row, and the worker runs the
attempt in a consumer span of the same trace (OpenTelemetry SDK, in-memory exporter); without
OpenTelemetry installed nothing is written and nothing breaks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from cli_proc import TESTS_DIR
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge._internal.config import loading
from ujobs_bridge.client import Client
from ujobs_bridge.testing import run_until_idle

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)  # once per process: the API refuses a second provider


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def test_the_workers_span_has_the_enqueuers_trace_id(
    dsn: str, client: Client, db: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    from apps.basic_jobs import add, always_fails

    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("http request") as enqueuer:
        ref = add.configure(client=client).enqueue(2, 3)
        failing = always_fails.configure(client=client).enqueue()
    trace_id = enqueuer.get_span_context().trace_id
    (stored,) = db.execute("select traceparent from x_jobs where id = %s", (ref.id,)).fetchone()
    assert stored.startswith(f"00-{trace_id:032x}-{enqueuer.get_span_context().span_id:016x}-")
    jobs = loading.load("apps.basic_jobs")
    registry = {name: jobs[name] for name in (add.name, always_fails.name)}
    run_until_idle(Worker(dsn, registry, WorkerConfig(queues=("basic",))))
    mine = {}
    for span in spans.get_finished_spans():
        if span.name == "process basic":
            mine.setdefault(span.attributes["messaging.message.id"], []).append(span)
    (ran,) = mine[str(ref.id)]
    assert ran.context.trace_id == trace_id
    assert ran.parent is not None and ran.parent.span_id == enqueuer.get_span_context().span_id
    assert ran.kind is SpanKind.CONSUMER
    assert ran.attributes["messaging.destination.name"] == "basic"
    assert ran.attributes["messaging.operation.type"] == "process"
    assert ran.attributes["ujobs.job.name"] == add.name
    assert ran.status.status_code is StatusCode.UNSET
    attempts = sorted(mine[str(failing.id)], key=lambda s: s.attributes["ujobs.job.attempt"])
    assert [s.attributes["ujobs.job.attempt"] for s in attempts] == [1, 2]
    assert all(s.context.trace_id == trace_id for s in attempts)
    assert all(s.status.status_code is StatusCode.ERROR for s in attempts)
    assert "this job never works" in attempts[0].status.description


def test_a_job_enqueued_outside_any_span_gets_no_traceparent(
    client: Client, db: psycopg.Connection[Any]
) -> None:
    from apps.basic_jobs import add

    ref = add.configure(client=client).enqueue(1, 1)
    row = db.execute("select traceparent from x_jobs where id = %s", (ref.id,)).fetchone()
    assert row == (None,)


def test_without_opentelemetry_nothing_changes(dsn: str) -> None:
    """A process where importing opentelemetry fails: enqueue and a worker run as before."""
    script = textwrap.dedent(
        f"""
        import sys
        class Blocked:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ImportError("opentelemetry is not installed here")
        sys.meta_path.insert(0, Blocked())
        from ujobs_bridge._internal.observe import tracing
        from ujobs_bridge._internal.config import loading
        from ujobs_bridge.client import connect
        from ujobs_bridge.testing import run_until_idle
        from ujobs_bridge import Worker, WorkerConfig
        from apps.basic_jobs import add
        assert not tracing.available()
        client = connect({dsn!r}, upgrade=False)
        ref = add.configure(client=client).enqueue(4, 5)
        jobs = loading.load("apps.basic_jobs")
        run_until_idle(Worker({dsn!r}, {{add.name: jobs[add.name]}}, WorkerConfig(queues=("basic",))))
        import psycopg
        with psycopg.connect({dsn!r}) as conn:
            print(conn.execute("select state, output, traceparent from x_jobs where id = %s", (ref.id,)).fetchone())
        """
    )
    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "('done', 9, None)"


def test_an_async_body_runs_in_the_enqueuers_trace_too(
    dsn: str, client: Client, spans: InMemorySpanExporter
) -> None:
    from apps.basic_jobs import async_double

    with trace.get_tracer("test").start_as_current_span("enqueue") as enqueuer:
        ref = async_double.configure(client=client).enqueue(21)
    jobs = loading.load("apps.basic_jobs")
    run_until_idle(
        Worker(dsn, {async_double.name: jobs[async_double.name]}, WorkerConfig(queues=("basic",)))
    )
    (ran,) = [
        s
        for s in spans.get_finished_spans()
        if s.attributes.get("messaging.message.id") == str(ref.id)
    ]
    assert ran.context.trace_id == enqueuer.get_span_context().trace_id


SPAN_SECRETS = ("hunter2", "s3cretpw", "Nosl4sh", "Nested_9")


@job(queue="traced_leaky", max_attempts=1)
def traced_leaky() -> None:
    raise ValueError(
        "login failed password=hunter2 via postgresql://bob:s3cretpw@db/prod"
        " and postgresql//bob:Nosl4sh@db/prod with "
        + repr({"credentials": {"user": "u", "pw": "Nested_9"}})  # a kwargs repr quoted
    )


def test_a_failed_attempts_span_carries_its_error_with_the_secrets_hidden(
    dsn: str, client: Client, spans: InMemorySpanExporter
) -> None:
    ref = traced_leaky.configure(client=client).enqueue()
    run_until_idle(
        Worker(dsn, {traced_leaky.name: traced_leaky}, WorkerConfig(queues=("traced_leaky",)))
    )
    (span,) = [
        s
        for s in spans.get_finished_spans()
        if s.attributes is not None and s.attributes.get("messaging.message.id") == str(ref.id)
    ]
    assert span.status.status_code is StatusCode.ERROR
    (event,) = [e for e in span.events if e.name == "exception"]
    attributes = dict(event.attributes or {})
    assert attributes["exception.type"] == "builtins.ValueError"
    assert "password=***" in str(attributes["exception.message"])
    assert "postgresql//bob:****@db" in str(attributes["exception.message"])
    assert "Traceback" in str(attributes["exception.stacktrace"])
    shown = f"{attributes} {span.status.description}"
    for secret in SPAN_SECRETS:
        assert secret not in shown, secret


def test_with_the_api_but_no_sdk_configured_an_attempt_makes_no_span() -> None:
    """The API's proxy provider stands in until an application sets its own: an attempt then
    makes no span at all (no context attached, no attributes built), and once a provider is
    set, the next attempt makes one."""
    script = textwrap.dedent(
        """
        import uuid
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from ujobs_bridge._internal.observe import tracing
        from ujobs_bridge.records import ClaimedJob
        claimed = ClaimedJob(id=uuid.uuid4(), name="n", queue="q", input={}, attempt=1,
                             max_attempts=1, lease_token=uuid.uuid4(), expired=False)
        with tracing.attempt_span(claimed) as record:
            assert record is tracing._nothing
            assert not trace.get_current_span().get_span_context().is_valid
        trace.set_tracer_provider(TracerProvider())
        with tracing.attempt_span(claimed) as record:
            assert record is not tracing._nothing
            assert trace.get_current_span().get_span_context().is_valid
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
