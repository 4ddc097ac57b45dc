"""Enqueue as a producer sees it: transactions, idempotency, batches, JSON-only payloads."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from apps import basic_jobs
from ujobs_bridge import ConfigError, FrozenClock, PayloadError, job
from ujobs_bridge.client import Client


def count(db: psycopg.Connection[Any], where: str = "true") -> int:
    row = db.execute(f"select count(*) from x_jobs where {where}").fetchone()
    assert row is not None
    return int(row[0])


def test_enqueue_returns_a_ready_job_with_the_payload(
    client: Client, db: psycopg.Connection[Any]
) -> None:
    ref = basic_jobs.add.configure(client=client).enqueue(2, b=3)
    row = db.execute(
        "select name, queue, state, input, attempt, max_attempts from x_jobs where id = %s",
        (ref.id,),
    ).fetchone()
    assert row == ("apps.basic_jobs.add", "basic", "ready", {"args": [2], "kwargs": {"b": 3}}, 0, 3)


def test_job_enqueued_in_a_rolled_back_transaction_leaves_no_job(
    client: Client, dsn: str, db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(dsn) as conn:
        basic_jobs.add.configure(conn=conn).enqueue(1, 2)
        conn.execute("select 1")
        conn.rollback()
    assert count(db) == 0


def test_job_enqueued_in_a_transaction_appears_only_at_commit(
    client: Client, dsn: str, db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(dsn) as conn:
        ref = basic_jobs.add.configure(conn=conn).enqueue(1, 2)
        assert count(db) == 0  # another session cannot see it yet
        conn.commit()
    assert count(db, f"id = '{ref.id}'") == 1


def test_one_live_job_per_idempotency_key(client: Client, db: psycopg.Connection[Any]) -> None:
    first = basic_jobs.add.configure(client=client, idempotency_key="order-7").enqueue(1, 1)
    second = basic_jobs.add.configure(client=client, idempotency_key="order-7").enqueue(9, 9)
    assert second.id == first.id and second.existing and not first.existing
    assert count(db) == 1
    db.execute("update x_jobs set state = 'done' where id = %s", (first.id,))
    third = basic_jobs.add.configure(client=client, idempotency_key="order-7").enqueue(1, 1)
    assert third.id != first.id and not third.existing  # a finished job frees its key
    assert count(db) == 2


def test_enqueue_many_is_one_batch_and_honours_keys(
    client: Client, db: psycopg.Connection[Any]
) -> None:
    live = basic_jobs.add.configure(client=client, idempotency_key="k1").enqueue(0, 0)
    requests = [basic_jobs.add.call(i, i) for i in range(500)]
    requests.append(basic_jobs.add.configure(idempotency_key="k1").call(5, 5))
    refs = client.enqueue_many(requests)
    assert len(refs) == 501
    assert refs[-1].id == live.id and refs[-1].existing
    assert count(db) == 501


def test_enqueue_many_rolls_back_with_the_callers_transaction(
    dsn: str, client: Client, db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(dsn) as conn:
        client.enqueue_many([basic_jobs.add.call(i, i) for i in range(10)], conn=conn)
        conn.rollback()
    assert count(db) == 0


@pytest.mark.parametrize(
    "payload",
    [datetime(2026, 1, 1, tzinfo=UTC), {1, 2}, math.nan, object()],
    ids=["datetime", "set", "nan", "object"],
)
def test_payload_that_is_not_json_is_refused_and_nothing_is_stored(
    client: Client, db: psycopg.Connection[Any], payload: Any
) -> None:
    with pytest.raises(PayloadError) as info:
        basic_jobs.add.configure(client=client).enqueue(payload, 1)
    assert "apps.basic_jobs.add" in str(info.value) and "hint" in str(info.value)
    assert count(db) == 0


def test_delay_and_run_at_use_the_injected_clock(
    frozen_client: Client, clock: FrozenClock, db: psycopg.Connection[Any]
) -> None:
    delayed = basic_jobs.add.configure(client=frozen_client, delay=timedelta(minutes=5)).enqueue(
        1, 1
    )
    at = clock.now() + timedelta(hours=2)
    scheduled = basic_jobs.add.configure(client=frozen_client, run_at=at).enqueue(1, 1)
    rows = dict(db.execute("select id, run_at from x_jobs").fetchall())
    assert rows[delayed.id] == clock.now() + timedelta(minutes=5)
    assert rows[scheduled.id] == at


def test_expires_is_relative_to_the_run_time(
    frozen_client: Client, clock: FrozenClock, db: psycopg.Connection[Any]
) -> None:
    ref = basic_jobs.add.configure(client=frozen_client, delay=60, expires=30).enqueue(1, 1)
    row = db.execute("select expires_at from x_jobs where id = %s", (ref.id,)).fetchone()
    assert row == (clock.now() + timedelta(seconds=90),)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"queue": "has space"}, "queue name"),
        ({"queue": "x" * 49}, "queue name"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": math.nan}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"backoff": math.inf}, "backoff"),
        ({"priority": 40000}, "priority"),
        ({"name": "bad name!"}, "job name"),
    ],
)
def test_bad_job_options_are_refused_at_declaration(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        job(**options)(lambda: None)
    assert needle in str(info.value)
    assert info.value.hint  # every refusal says what to do


@pytest.mark.parametrize(
    "options",
    [
        {"delay": -1},
        {"delay": math.nan},
        {"run_at": datetime(2026, 1, 1)},
        {"idempotency_key": ""},
        {"delay": 1, "run_at": datetime(2026, 1, 1, tzinfo=UTC)},
    ],
)
def test_bad_enqueue_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        basic_jobs.add.configure(**options)


def test_async_enqueue_joins_the_callers_async_transaction(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    import asyncio

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            await basic_jobs.add.configure(conn=conn).enqueue_async(1, 2)
            await conn.rollback()
            ref = await basic_jobs.add.configure(conn=conn).enqueue_async(3, 4)
            await conn.commit()
            assert count(db, f"id = '{ref.id}'") == 1

    asyncio.run(scenario())
    assert count(db) == 1


def test_a_sync_enqueue_refuses_an_async_connection(dsn: str) -> None:
    import asyncio

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            with pytest.raises(ConfigError, match="async connection"):
                basic_jobs.add.configure(conn=conn).enqueue(1, 2)

    asyncio.run(scenario())
