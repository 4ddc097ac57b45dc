"""Celery's events in Postgres: the statements' contracts (insert a batch, read with a cursor and
filters, purge by age in batches, through the retention sweep's target), and the emitter's faults:
a killed database connection loses no event and stores none twice, a database that is down warns
once, keeps the newest events up to its bound and counts the rest, and never raises to a task."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from celery_compat import Celery
from celery_compat.backend.retention import purge_old_events
from celery_compat.db import events as events_db
from celery_compat.events import emitter as event_emitter
from celery_compat.events import log as event_log
from celery_compat.events.emitter import EventEmitter
from conftest import wait_for
from ujobs_bridge._internal.jobs.purge import targets

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def event(type_: str, at: datetime, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "hostname": "n@h", "timestamp": at.timestamp(), "clock": 1, **fields}


def test_a_batch_is_stored_and_read_back_in_order_with_filters(db: psycopg.Connection[Any]) -> None:
    batch = [
        event("worker-online", NOW, freq=2.0),
        event("task-received", NOW, uuid="t1", name="a", args="(1,)"),
        event("task-succeeded", NOW + timedelta(seconds=1), uuid="t1", result="2", runtime=0.1),
        {**event("task-failed", NOW, uuid="t2", exception="E()"), "hostname": "m@h"},
    ]
    assert events_db.insert_events(db, batch) == 4
    assert events_db.insert_events(db, []) == 0
    every = event_log.read(db)
    assert [e["type"] for e in every] == [e["type"] for e in batch]
    assert every[2]["result"] == "2" and every[2]["runtime"] == 0.1  # the event as sent
    assert [e["type"] for e in event_log.read(db, task_id="t1")] == [
        "task-received",
        "task-succeeded",
    ]
    assert [e["uuid"] for e in event_log.read(db, hostname="m@h")] == ["t2"]
    assert [e["type"] for e in event_log.read(db, types=["worker-online", "task-failed"])] == [
        "worker-online",
        "task-failed",
    ]
    assert [e["type"] for e in event_log.read(db, after_id=every[1]["id"], limit=1)] == [
        "task-succeeded"
    ]
    since = event_log.read(db, since=NOW + timedelta(seconds=1))
    assert [e["type"] for e in since] == ["task-succeeded"]
    with pytest.raises(ValueError, match="limit"):
        event_log.read(db, limit=0)


def test_old_events_are_purged_in_batches_by_the_retention_target(
    db: psycopg.Connection[Any],
) -> None:
    old = [event("worker-heartbeat", NOW - timedelta(days=8, seconds=i)) for i in range(7)]
    events_db.insert_events(db, [*old, event("worker-heartbeat", NOW)])
    assert events_db.purge_events(db, NOW - timedelta(days=7), 3) == 3  # the oldest first
    assert purge_old_events(db, NOW - timedelta(days=7)) == 4
    assert [e["timestamp"] for e in event_log.read(db)] == [NOW.timestamp()]
    assert "x_celery_events" in {t.name for t in targets()}  # the purge job sweeps it


@pytest.fixture
def app(dsn: str) -> Any:
    a = Celery("events_store")
    yield a
    a.close()


def test_a_killed_connection_loses_no_event_and_stores_none_twice(
    app: Any, dsn: str, db: psycopg.Connection[Any], monkeypatch: Any, caplog: Any
) -> None:
    monkeypatch.setattr(event_emitter, "RETRY_S", 0.0)
    emitter = EventEmitter(app, dsn=dsn, broker=False)
    for i in range(3):
        emitter.emit("task-succeeded", "n@h", 1, uuid=f"a{i}", result="1", runtime=0.0)
    assert emitter.tick() == 3  # the connection is open now
    killed = db.execute(
        "select count(pg_terminate_backend(pid)) from pg_stat_activity"
        " where datname = current_database() and application_name like 'ujobs:events:%%'"
    ).fetchone()
    assert killed == (1,)
    for i in range(3):
        emitter.emit("task-succeeded", "n@h", 1, uuid=f"b{i}", result="1", runtime=0.0)
    stored: list[int] = []
    with caplog.at_level(logging.WARNING, logger="celery_compat.events"):
        # The kill is seen either at checkout (the connection policy replaces the connection at
        # once) or by the write (held, warned, written on a fresh connection at a later tick).
        wait_for(
            lambda: stored.append(emitter.tick()) or sum(stored) == 3,
            what="the held events on a fresh connection",
        )
    uuids = [e["uuid"] for e in event_log.read(db)]
    assert uuids == ["a0", "a1", "a2", "b0", "b1", "b2"]
    warned = [r for r in caplog.records if "postgres_unreachable" in r.getMessage()]
    assert len(warned) <= 1
    if warned:
        assert any("postgres_reachable" in r.getMessage() for r in caplog.records)
    emitter.stop()


def test_a_database_that_is_down_warns_once_and_keeps_the_newest_events(
    app: Any, monkeypatch: Any, caplog: Any
) -> None:
    monkeypatch.setattr(event_emitter, "RETRY_S", 0.0)
    emitter = EventEmitter(
        app, dsn="postgresql://postgres@127.0.0.1:1/none", broker=False, limit=10
    )
    with caplog.at_level(logging.WARNING, logger="celery_compat.events"):
        for round_ in range(3):
            for i in range(10):
                emitter.emit("task-started", "n@h", 1, uuid=f"{round_}-{i}")
            assert emitter.tick() == 0
    assert emitter.postgres is not None
    held = [e["uuid"] for e in emitter.postgres.pending]
    assert held == [f"2-{i}" for i in range(10)]  # the newest, in order
    assert emitter.postgres.dropped == 20
    warned = [r for r in caplog.records if "postgres_unreachable" in r.getMessage()]
    assert len(warned) == 1 and "127.0.0.1:1" in warned[0].getMessage()
    assert emitter.close(timeout_s=10)
