"""``enqueue_many`` writes every row's own values, whichever way each column travels.

A batch's columns go as binary arrays: a value every row shares is sent once, a column no row
sets as NULL, the others element by element. The rows must not tell the difference: each one
has its own name, queue, input, priority, retry policy, key, due time and expiry, and a batch
of identical calls is as many identical rows under distinct ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from apps import basic_jobs
from ujobs_bridge import ErrorCode, PayloadError
from ujobs_bridge.client import Client

DUE = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def rows(db: psycopg.Connection[Any]) -> dict[Any, tuple[Any, ...]]:
    found = db.execute(
        "select id, name, queue, input, priority, max_attempts, idempotency_key, state,"
        "       run_at, expires_at, tenant_id from x_jobs"
    ).fetchall()
    return {r[0]: tuple(r[1:]) for r in found}


def test_a_mixed_batch_keeps_each_rows_values(client: Client, db: psycopg.Connection[Any]) -> None:
    requests = [
        basic_jobs.add.call(1, 2),
        basic_jobs.flaky.configure(priority=7, idempotency_key="k-é").call("ключ"),
        basic_jobs.add.configure(run_at=DUE, queue="other", tenant_id="t1").call(3, b=4),
        basic_jobs.always_fails.configure(expires=DUE).call(),
        basic_jobs.add.configure(priority=-5).call(0.5, None),
    ]
    refs = client.enqueue_many(requests)
    got = rows(db)
    assert len(got) == 5 and [r.existing for r in refs] == [False] * 5
    assert got[refs[0].id][:7] == (
        "apps.basic_jobs.add", "basic", {"args": [1, 2], "kwargs": {}}, 0, 3, None, "ready",
    )  # fmt: skip
    assert got[refs[1].id][:7] == (
        "apps.basic_jobs.flaky", "basic", {"args": ["ключ"], "kwargs": {}}, 7, 4, "k-é", "ready",
    )  # fmt: skip
    third = got[refs[2].id]
    assert third[1:3] == ("other", {"args": [3], "kwargs": {"b": 4}})
    assert third[7] == DUE and third[9] == "t1"
    fourth = got[refs[3].id]
    assert fourth[0] == "apps.basic_jobs.always_fails" and fourth[4] == 2 and fourth[8] == DUE
    assert got[refs[4].id][2:4] == ({"args": [0.5, None], "kwargs": {}}, -5)


def test_identical_calls_are_distinct_rows(client: Client, db: psycopg.Connection[Any]) -> None:
    refs = client.enqueue_many([basic_jobs.add.call(1, 1) for _ in range(300)])
    got = rows(db)
    assert len({r.id for r in refs}) == 300 and set(got) == {r.id for r in refs}
    first = got[refs[0].id]
    assert first[:7] == (
        "apps.basic_jobs.add", "basic", {"args": [1, 1], "kwargs": {}}, 0, 3, None, "ready",
    )  # fmt: skip
    assert all(v == first for v in got.values())


def test_a_key_twice_in_one_batch_answers_with_the_first(
    client: Client, db: psycopg.Connection[Any]
) -> None:
    requests = [basic_jobs.add.configure(idempotency_key="same").call(i, i) for i in range(3)]
    refs = client.enqueue_many([*requests, basic_jobs.add.call(9, 9)])
    assert refs[1].id == refs[0].id == refs[2].id and refs[1].existing and refs[2].existing
    assert not refs[0].existing and not refs[3].existing
    assert len(rows(db)) == 2


def test_a_refused_input_in_a_batch_stores_nothing(
    client: Client, db: psycopg.Connection[Any]
) -> None:
    requests = [basic_jobs.add.call(1, 1), basic_jobs.add.call(float("inf"), 1)]
    with pytest.raises(PayloadError) as info:
        client.enqueue_many(requests)
    assert info.value.code == ErrorCode.PAYLOAD_NOT_JSON and "Infinity" in str(info.value)
    assert rows(db) == {}


def test_a_due_time_from_the_injected_clock_applies_per_row(
    client: Client, db: psycopg.Connection[Any]
) -> None:
    later = basic_jobs.add.configure(delay=timedelta(hours=1)).call(1, 1)
    now = basic_jobs.add.call(2, 2)
    refs = client.enqueue_many([later, now])
    got = rows(db)
    assert got[refs[0].id][7] - got[refs[1].id][7] >= timedelta(minutes=59)
