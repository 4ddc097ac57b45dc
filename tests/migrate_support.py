"""Shared wiring for ``tests/test_migrate_*.py``: real Celery producers on the local Redis and
RabbitMQ, unique queue names per test (cleaned up after), the quarantine table, an in-process
drain, a bridge worker thread, and row readers.

Why it exists: every migrate test publishes with REAL Celery (``celery.Celery`` + ``delay`` /
``apply_async``) into a real broker and then looks at what the drainer made of it; keeping the
plumbing here keeps the test files about behaviour.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import celery
import psycopg
import pytest
import redis
from psycopg.rows import dict_row

from celery_compat.worker import revoked_ids
from celery_compat.worker.execution import jobs_for_app
from migrate.appinfo import AppInfo
from migrate.batch import Context
from migrate.decoding import Accept
from migrate.report import Stats
from migrate.runner import DrainLoop, SourceOptions, open_source
from ujobs_bridge import Worker, WorkerConfig, connect
from ujobs_bridge._internal.config import loading
from ujobs_bridge.testing import amqp_url, redis_url

REDIS_DB = 6  # on the test kit's Redis server: a database of this process's own
REDIS_URL = redis_url(REDIS_DB)


def __getattr__(name: str) -> str:
    """``AMQP_URL``: the test kit's RabbitMQ vhost, made on first use (a module that never
    publishes to RabbitMQ needs none)."""
    if name == "AMQP_URL":
        return amqp_url()
    raise AttributeError(name)


def amqp_connection() -> Any:
    """A py-amqp connection (not yet connected) to the test kit's vhost."""
    import amqp

    parts = urllib.parse.urlsplit(amqp_url())
    return amqp.Connection(
        f"{parts.hostname}:{parts.port or 5672}",
        userid=urllib.parse.unquote(parts.username or "guest"),
        password=urllib.parse.unquote(parts.password or "guest"),
        virtual_host=urllib.parse.unquote(parts.path[1:]) or "/",
    )


def unique(prefix: str = "mq") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def redis_client() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_URL}: {exc}")
    return client


def clean_redis(client: redis.Redis, marker: str) -> None:
    for key in list(client.scan_iter(match=f"*{marker}*", count=1000)):
        client.delete(key)


@contextlib.contextmanager
def producer(broker_url: str, queue: str, **conf: Any) -> Iterator[SimpleNamespace]:
    """A plain ``celery.Celery`` app publishing the ``migrate_proj`` task names to ``queue``."""
    app = celery.Celery(f"producer-{queue}", broker=broker_url, set_as_current=False)
    app.conf.update(task_default_queue=queue, broker_connection_retry_on_startup=True, **conf)

    @app.task(name="migrate_proj.add", shared=False)
    def add(x: Any, y: Any) -> Any:
        return x + y

    @app.task(name="migrate_proj.mul", shared=False)
    def mul(x: int, y: int) -> int:
        return x * y

    @app.task(name="migrate_proj.record", shared=False)
    def record(tag: str) -> str:
        return tag

    try:
        yield SimpleNamespace(app=app, add=add, mul=mul, record=record)
    finally:
        app.close()


def ready_count(queue: str) -> int:
    """Messages RabbitMQ counts as ready in ``queue``."""
    conn = amqp_connection()
    conn.connect()
    try:
        return int(conn.channel().queue_declare(queue, passive=True).message_count)
    finally:
        conn.close()


def wait_for_ready(queue: str, count: int) -> None:
    """RabbitMQ counts a queue's messages asynchronously: wait until ``count`` show."""
    from conftest import wait_for

    wait_for(lambda: ready_count(queue) >= count, timeout=30, what=f"{count} messages in {queue}")


def ensure_quarantine(dsn: str) -> None:
    """Empty the quarantine (``conftest``'s per-test truncation does not know this table)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("truncate x_migrate_quarantine")


def app_info(**changes: Any) -> AppInfo:
    from apps.migrate_proj import app

    return dataclasses.replace(AppInfo.from_app(app), **changes)


def drain(
    dsn: str,
    url: str,
    queues: list[str] | None,
    *,
    info: AppInfo | None = None,
    accept: Accept | None = None,
    all_queues: bool = False,
    restore_unacked: bool = False,
    batch: int = 500,
    drainer_id: str | None = None,
    limit: int | None = None,
    management_url: str | None = None,
) -> Stats:
    """One in-process drain, as ``ujobs-bridge migrate`` runs it (without the CLI)."""
    info = info or app_info()
    accept = accept or Accept.parse(
        ["json", "msgpack", "yaml"], pickle=False, max_bytes=8 * 1024 * 1024
    )
    options = SourceOptions(
        queues,
        all_queues,
        drainer_id or unique("drainer"),
        restore_unacked,
        batch,
        management_url=management_url,
    )
    source = open_source(url, info, options)
    from migrate.runner import broker_kind, masked

    ctx = Context(info, accept, masked(url), broker_kind(url))
    stats = Stats(broker=masked(url), queues=list(source.queues))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            DrainLoop(source, conn, ctx, threading.Event(), batch=batch, limit=limit).run(stats)
    finally:
        source.close()
    return stats


@contextlib.contextmanager
def bridge_worker(dsn: str, queues: tuple[str, ...]) -> Iterator[Worker]:
    """The ``migrate_proj`` tasks run by a real bridge worker thread (results in Postgres)."""
    from apps.migrate_proj import RAN, app

    RAN.clear()
    client = connect(dsn, upgrade=False)
    app.use_ujobs_client(client)
    worker = Worker(
        dsn,
        loading.build(jobs_for_app(app)),
        WorkerConfig(queues=queues, concurrency=4, poll_s=0.05, lease_s=5),
        channels=(revoked_ids.channel(),),
    )
    worker.start()
    try:
        yield worker
    finally:
        worker.stop(timeout_s=5)
        app.use_ujobs_client(None)
        client.close()


def rows(dsn: str, where_queue: str | None = None) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row)
        return cur.execute(
            "select j.id, j.name, j.queue, j.state, j.run_at, j.priority, j.input, j.last_error,"
            " t.task_id, t.retries from x_jobs j join x_celery_tasks t on t.job_id = j.id"
            " where %(q)s::text is null or j.queue = %(q)s order by j.created_at, j.id",
            {"q": where_queue},
        ).fetchall()


def ledger_ids(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute("select task_id from x_celery_tasks").fetchall()]


def quarantined(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row)
        return cur.execute(
            "select id, queue, reason, detail, task, task_id, format, size, seen, resolution, job_id,"
            " raw from x_migrate_quarantine order by id"
        ).fetchall()


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    """A Redis client for the test (skips locally when Redis is down; fails under CI)."""
    client = redis_client()
    yield client
    client.close()


@pytest.fixture
def queue(r: redis.Redis) -> Iterator[str]:
    """A queue name unique to the test; its keys are deleted afterwards."""
    name = unique()
    yield name
    clean_redis(r, name)


@pytest.fixture
def qdsn(dsn: str) -> str:
    """The test database with the quarantine emptied."""
    ensure_quarantine(dsn)
    return dsn
