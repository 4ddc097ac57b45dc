"""A Celery task's terminal failure reads FAILURE in every view an operator looks at (the
dashboard's pages, ``/metrics``, ``jobs ls``/``show``/``dead``/``stats``), never a dead letter: Celery
decided its retries, so "attempt 1/3" and ``state="dead"`` would tell the operator that
something is stuck that is not. An engine dead letter (a worker lost every attempt) stays one.
All in this process: a real bridge worker, the dashboard's ASGI app called directly, the CLI
through click's runner."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from celery import states
from click.testing import CliRunner

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    worker,
)
from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge._internal.cli import cli as command_line
from ujobs_bridge._internal.dashboard.app import create_app
from ujobs_bridge._internal.dashboard.config import DashboardConfig
from ujobs_bridge.client import Client
from ujobs_bridge.testing import run_until_idle


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app
    t.GATE.set()


@job(queue="celery", max_attempts=1)
def engine_job() -> None:
    raise RuntimeError("an engine job that dead-letters")


def _get(dsn: str, path: str) -> str:
    """GET ``path`` from the dashboard's own ASGI app, in this process."""
    asgi = create_app(DashboardConfig(dsn=dsn))
    target, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": target,
        "raw_path": target.encode(),
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    body: list[bytes] = []
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body":
            body.append(message.get("body", b""))

    async def call() -> None:
        async with asgi.router.lifespan_context(asgi):
            await asgi(scope, receive, send)

    asyncio.run(call())
    assert status == [200], (path, status, b"".join(body)[:500])
    return b"".join(body).decode()


def _cli(dsn: str, *args: str) -> Any:
    result = CliRunner().invoke(command_line, [*args, "--dsn", dsn, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_celery_failure_is_failure_everywhere_and_not_a_dead_letter(
    app: Any, dsn: str, client: Client
) -> None:
    with worker(app, dsn):
        r = t.fail.delay("bad input")
        with pytest.raises(ValueError):
            r.get(timeout=10)
    assert r.state == states.FAILURE
    engine_job.configure(client=client).enqueue()  # an engine dead letter beside it
    run_until_idle(Worker(dsn, {engine_job.name: engine_job}, WorkerConfig(queues=("celery",))))

    listed = {row["name"]: row for row in _cli(dsn, "jobs", "ls")}
    assert listed[t.fail.name]["state"] == "FAILURE"
    assert listed[t.fail.name]["failure_kind"] == "FAILURE"
    assert listed[engine_job.name]["state"] == "dead"
    assert [row["name"] for row in _cli(dsn, "jobs", "dead")] == [engine_job.name]
    failures = _cli(dsn, "jobs", "ls", "--state", "FAILURE")
    assert [row["name"] for row in failures] == [t.fail.name]
    assert [row["name"] for row in _cli(dsn, "jobs", "ls", "--state", "dead")] == [engine_job.name]
    assert _cli(dsn, "jobs", "show", r.id)["state"] == "FAILURE"
    stats = {(s["queue"], s["state"]): s["jobs"] for s in _cli(dsn, "jobs", "stats")}
    assert (stats[("celery", "FAILURE")], stats[("celery", "dead")]) == (1, 1)

    metrics = _get(dsn, "/metrics")
    assert re.search(r'ujobs_queue_jobs\{queue="celery",state="FAILURE"\} 1\.0', metrics)
    assert re.search(r'ujobs_queue_jobs\{queue="celery",state="dead"\} 1\.0', metrics)

    overview = _get(dsn, "/")
    assert re.search(r'data-col="dead">.*>1</a>', overview)
    assert 'data-kind="FAILURE"' in overview and "1 FAILURE" in overview
    throughput = overview.split('id="throughput"', 1)[1].split('id="latency"', 1)[0]
    legend = re.sub(r"<[^>]+>|\s+", " ", throughput.split("<svg", 1)[0])
    assert "dead letters 1" in legend and "FAILURE 1" in legend  # the chart tells them apart
    assert re.search(r'class="dead"[^>]*><title>\d\d:\d\d: 1 dead letters<', throughput)
    assert re.search(r'class="failed"[^>]*><title>\d\d:\d\d: 1 FAILURE<', throughput)
    page = _get(dsn, f"/jobs/{listed[t.fail.name]['id']}")
    assert 'data-state="FAILURE"' in page and "1 of 3" not in page
    listing = _get(dsn, "/jobs?state=FAILURE")
    assert 'data-state="FAILURE"' in listing and "1/3" not in listing
    assert engine_job.name not in listing
    dead = _get(dsn, "/dead")
    assert engine_job.name in dead and t.fail.name not in dead

    # The dead letters' bulk steers reach only the dead letters; FAILURE is steered by its name.
    requeued = _cli(dsn, "jobs", "requeue", "--state", "dead", "--yes")
    assert (requeued["matched"], requeued["changed"]) == (1, 1)
    assert _cli(dsn, "jobs", "show", r.id)["state"] == "FAILURE"
    again = _cli(dsn, "jobs", "requeue", "--state", "FAILURE", "--queue", "celery", "--yes")
    assert (again["matched"], again["changed"]) == (1, 1)
    assert _cli(dsn, "jobs", "show", r.id)["state"] == "ready"
