"""Traces under the process pool: ``ujobs-bridge worker -P processes`` runs each body in a spawned
child, and the child's span for the attempt (made with the tracer provider the ``-A`` module set
up at import in that child) belongs to the enqueuer's trace, with the enqueuer's span as parent;
a failed attempt's span is ERROR. The spans are exported to a file by the child itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import CliProc
from opentelemetry.sdk.trace import TracerProvider

from conftest import wait_for
from ujobs_bridge.client import Client

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def procs() -> Iterator[list[CliProc]]:
    started: list[CliProc] = []
    yield started
    for proc in started:
        proc.close()
        print(f"--- worker {proc.pid} ---\n{proc.output()[-3000:]}")


def spans_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("processor", ["simple", "batch"])
def test_a_process_pool_childs_span_has_the_enqueuers_trace_id(
    dsn: str,
    client: Client,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    procs: list[CliProc],
    processor: str,
) -> None:
    """``batch``: the child's spans wait in its BatchSpanProcessor until the worker stops, so
    they are in the file only if the child flushes its provider as it exits."""
    from apps.traced_jobs import fails, where

    tracer = TracerProvider().get_tracer("enqueuer")  # this test's own, not a global provider
    with tracer.start_as_current_span("http request") as enqueuer:
        ref = where.configure(client=client).enqueue(5)
        failing = fails.configure(client=client).enqueue()
    trace_id = f"{enqueuer.get_span_context().trace_id:032x}"
    parent_id = f"{enqueuer.get_span_context().span_id:016x}"
    spans_file = tmp_path / "spans.jsonl"
    worker = CliProc(
        ["worker", "-A", "apps.traced_jobs", "-P", "processes", "-c", "1", "--poll", "0.2",
         "--dsn", dsn],
        tmp_path / "worker.log",
        env={"TRACED_SPANS_FILE": str(spans_file), "TRACED_BATCH": "1" if processor == "batch" else ""},
    )  # fmt: skip
    procs.append(worker)

    def finished() -> bool:
        states = db.execute(
            "select state from x_jobs where id = any(%s) order by state",
            ([ref.id, failing.id],),
        ).fetchall()
        return states == [("dead",), ("done",)]

    wait_for(finished, timeout=120, what="both jobs to settle in the process pool")
    (output,) = db.execute("select output from x_jobs where id = %s", (ref.id,)).fetchone()
    child_pid = output["pid"]
    assert child_pid != worker.pid  # the body ran in a pool child
    if processor == "batch":
        assert spans_in(spans_file) == []  # still in the child's batch
        worker.term()  # to the whole process group, as systemd's default KillMode does
        assert worker.wait(timeout=60) == 0, worker.output()
    by_job: dict[str, list[dict[str, Any]]] = {}
    for span in wait_for(
        lambda: len(s := spans_in(spans_file)) >= 2 and s, timeout=30, what="the spans exported"
    ):  # type: ignore[union-attr]
        by_job.setdefault(span["attributes"].get("messaging.message.id"), []).append(span)
    (ran,) = by_job[str(ref.id)]
    assert ran["pid"] == child_pid  # made and exported by the child
    assert ran["name"] == "process traced"
    assert (ran["trace_id"], ran["parent_span_id"]) == (trace_id, parent_id)
    assert ran["attributes"]["ujobs.job.name"] == where.name
    assert ran["status"] == "UNSET"
    (failed,) = by_job[str(failing.id)]
    assert failed["trace_id"] == trace_id and failed["status"] == "ERROR"
    assert failed["pid"] != worker.pid
    worker.term()
    assert worker.wait(timeout=60) == 0, worker.output()
    assert len(spans_in(spans_file)) == 2  # one span per attempt, none twice
