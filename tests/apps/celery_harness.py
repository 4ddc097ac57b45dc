"""Shared wiring for the celery_compat behaviour tests: bind an app to the test database, run its
tasks on a real bridge worker thread, connect signal receivers for one test, read job rows.

Why it exists: every ``tests/test_celery_*.py`` file needs the same three things (an app talking
to the per-test database, a worker that runs the app's tasks through ``jobs_for_app``, rows to
look at); keeping them here keeps the test files about behaviour.

What it is not: a mock. The worker is ``ujobs_bridge.Worker`` on real Postgres; results come from
the real result backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from celery_compat.sending.message_row import from_input
from celery_compat.worker import revoked_ids
from celery_compat.worker.execution import jobs_for_app
from celery_compat.worker.settings import UNKNOWN_TASK_FAILS_AFTER_S
from ujobs_bridge import FrozenClock, Worker, WorkerConfig, connect
from ujobs_bridge._internal.clock import Clock, SystemClock
from ujobs_bridge._internal.config import loading
from ujobs_bridge.client import Client

_BOUND: dict[int, Any] = {}


@pytest.fixture(scope="session", autouse=True)
def celery_listeners_closed(pg_dsn: str) -> Iterator[None]:
    """Import this into a test module: at the end of the session, before the test database is
    dropped, the result backends' LISTEN connections of every app ``bound`` are closed."""
    yield
    for app in list(_BOUND.values()):
        app.backend.close()
    _BOUND.clear()


def track(app: Any) -> None:
    """Close ``app``'s result listener at the end of the session (``bound`` does this for you)."""
    _BOUND[id(app)] = app


@contextlib.contextmanager
def bound(app: Any, dsn: str) -> Iterator[Client]:
    """The app's sends and results go to ``dsn`` for the duration."""
    track(app)
    client = connect(dsn, upgrade=False)
    app.use_ujobs_client(client)
    try:
        yield client
    finally:
        app.use_ujobs_client(None)
        client.close()


@contextlib.contextmanager
def worker(
    app: Any,
    dsn: str,
    *,
    queues: tuple[str, ...] = ("celery",),
    clock: Clock | None = None,
    concurrency: int = 4,
    start: bool = True,
    max_result_bytes: int | None = None,
    sweep_s: float | None = None,
    node_name: str | None = None,
) -> Iterator[Worker]:
    """A bridge worker thread running ``app``'s tasks (started unless ``start=False``: tick it);
    ``max_result_bytes``: its ``--max-result-bytes`` (default: the worker's); ``sweep_s``: how
    often it sweeps (rescues, unknown task names); ``node_name``: its ``-n`` (default
    ``ujobs@<host>``). Unknown task names fail as under
    ``ujobs-bridge worker -A`` (``UNKNOWN_TASK_FAILS_AFTER_S``)."""
    limit: dict[str, Any] = (
        {} if max_result_bytes is None else {"max_result_bytes": max_result_bytes}
    )
    if sweep_s is not None:
        limit["sweep_s"] = sweep_s
    w = Worker(
        dsn,
        loading.build(jobs_for_app(app)),
        WorkerConfig(
            queues=queues,
            concurrency=concurrency,
            poll_s=0.05,
            lease_s=5,
            unregistered_dead_after_s=UNKNOWN_TASK_FAILS_AFTER_S,
            **limit,
        ),
        clock=clock or SystemClock(),
        channels=(revoked_ids.channel(),),
        node_name=node_name,
    )
    if start:
        w.start()
    try:
        yield w
    finally:
        w.stop(timeout_s=5)


def frozen_app_clock(app: Any, monkeypatch: Any, start: datetime) -> FrozenClock:
    """One frozen instant for Celery (``app.now()``: countdown → eta) and the worker alike."""
    clock = FrozenClock(start)
    monkeypatch.setattr(app, "now", lambda: clock.now().astimezone(app.timezone))
    return clock


@contextlib.contextmanager
def receivers(*pairs: tuple[Any, Callable[..., Any]]) -> Iterator[None]:
    """Connect ``(signal, handler)`` pairs for one block, strongly, and always disconnect."""
    for signal, handler in pairs:
        signal.connect(handler, weak=False)
    try:
        yield
    finally:
        for signal, handler in pairs:
            signal.disconnect(handler)


def jobs(dsn: str, name: str | None = None) -> list[dict[str, Any]]:
    """The job rows (oldest first) a user would list, optionally of one task name."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row)
        return cur.execute(
            "select id, name, queue, state, run_at, priority, input, last_error, attempt, created_at"
            " from x_jobs where %(name)s::text is null or name = %(name)s order by created_at, id",
            {"name": name},
        ).fetchall()


def headers_of(row: dict[str, Any]) -> dict[str, Any]:
    return dict(row["input"]["headers"])


def body_of(row: dict[str, Any]) -> dict[str, Any]:
    """A Celery row's ``args``/``kwargs``/``embed``, read as the worker reads them (the body is
    kept as exact JSON text inside ``input``, see ``celery_compat.sending.message_row``)."""
    message = from_input(row["input"], queue=str(row.get("queue") or ""))
    return {"args": message.args, "kwargs": message.kwargs, "embed": message.embed}


def eta_of(row: dict[str, Any]) -> datetime:
    value = row["run_at"]
    assert isinstance(value, datetime)
    return value


def seconds_between(a: datetime, b: datetime) -> float:
    return (b - a) / timedelta(seconds=1)
