"""What the drain's fast path must not change: Redis messages come out oldest first, in kombu's
consumption order, one batch per processing list that is let go only after its commit (and
only that batch's list, even when two drainers share a drainer id); NaN and Infinity in
arguments and headers (which Celery's serializers happily write) are moved exactly, while a task
id the row cannot hold is quarantined instead of failing the batch's INSERT; and a drain leaves the process's garbage-collector settings as it found them.
Messages are published by REAL Celery."""

from __future__ import annotations

import gc
import json
import math
from collections import Counter

import migrate_support as ms
import redis
from migrate_support import qdsn, queue, r  # noqa: F401 - shared fixtures

from apps.celery_harness import body_of
from migrate.redis_drain import RedisSource


def _processing(r: redis.Redis, queue: str) -> dict[bytes, list[bytes]]:
    return {
        key: r.lrange(key, 0, -1)
        for key in r.scan_iter(match=f"*_ujobs.migrate*{queue}*")
        if r.type(key) == b"list"
    }


def test_takes_are_oldest_first_in_kombus_order_and_each_batch_is_let_go_alone(
    r: redis.Redis, queue: str
) -> None:
    with ms.producer(ms.REDIS_URL, queue) as p:
        for i in range(40):
            p.add.apply_async((i, i), priority=(0, 0, 4, 7, 9)[i % 5])
    source = RedisSource(ms.REDIS_URL, ms.app_info(), [queue], drainer_id=ms.unique("d"))
    try:
        lists = [r.lrange(key, 0, -1)[::-1] for key in source.keys_of(queue)]  # oldest first
        expected = [raw for items in lists for raw in items]
        assert len(expected) == 40 and sum(1 for items in lists if items) >= 3

        batches = []
        while taken := source.take(7):
            batches.append(taken)
        assert [t.raw for batch in batches for t in batch] == expected  # oldest first, in order
        assert [len(b) for b in batches] == [7, 7, 7, 7, 7, 5]
        held = _processing(r, queue)
        assert len(held) == 6, "each batch is held in a processing list of its own"
        assert sorted(map(sorted, held.values())) == sorted(
            sorted(t.raw for t in b) for b in batches
        )

        source.acknowledge(batches[2])
        after = _processing(r, queue)
        assert len(after) == 5 and sorted(map(sorted, after.values())) == sorted(
            sorted(t.raw for t in b) for i, b in enumerate(batches) if i != 2
        ), "settling one batch lets go of that batch and nothing else"
    finally:
        source.close()


def test_two_drainers_with_one_id_never_let_go_of_each_others_batches(
    qdsn: str, r: redis.Redis, queue: str
) -> None:
    with ms.producer(ms.REDIS_URL, queue) as p:
        ids = [p.record.delay(f"m{i}").id for i in range(30)]
    info = ms.app_info()
    a = RedisSource(ms.REDIS_URL, info, [queue], drainer_id="shared-host")
    b = RedisSource(ms.REDIS_URL, info, [queue], drainer_id="shared-host")
    try:
        held_a, held_b = a.take(10), b.take(10)
        a.acknowledge(held_a)  # as if A had committed its batch
        still = _processing(r, queue)
        assert list(map(sorted, still.values())) == [sorted(t.raw for t in held_b)]
    finally:
        a.close()
        b.close()

    # B died before its commit: the next drainer with that id recovers B's batch, then drains
    # the rest, each message once. (A's batch is gone from Redis, as after A's commit; this
    # test never committed it, so those ten are the ones without a row.)
    stats = ms.drain(qdsn, ms.REDIS_URL, [queue], drainer_id="shared-host")
    a_ids = {json.loads(t.raw)["headers"]["id"] for t in held_a}
    assert stats.outcomes["moved"] == 20
    assert Counter(ms.ledger_ids(qdsn)) == Counter(set(ids) - a_ids)
    assert _processing(r, queue) == {} and len(a_ids) == 10


def test_nan_and_infinity_move_exactly_and_an_unstorable_task_id_is_quarantined(
    qdsn: str, r: redis.Redis, queue: str
) -> None:
    with ms.producer(ms.REDIS_URL, queue) as p:
        before = p.add.delay(1, 2).id
        nan = p.add.delay(float("nan"), 1e16).id
        odd_header = p.add.apply_async((1, 1), headers={"x-weight": float("nan")}).id
        odd_id = p.add.apply_async((1, 1), task_id="order\x00one").id
        after = p.add.delay(3, 4).id
    with ms.producer(ms.REDIS_URL, queue, task_serializer="msgpack") as p:
        infinite = p.add.delay(float("inf"), 1).id
        packed = p.add.delay(5, 6).id

    stats = ms.drain(qdsn, ms.REDIS_URL, [queue])

    assert sorted(ms.ledger_ids(qdsn)) == sorted([before, nan, odd_header, after, infinite, packed])
    args = {row["task_id"]: body_of(row)["args"] for row in ms.rows(qdsn)}
    assert math.isnan(args[nan][0]) and args[nan][1] == 1e16 and type(args[nan][1]) is float
    assert args[infinite] == [float("inf"), 1]
    kept = ms.quarantined(qdsn)
    assert [e["reason"] for e in kept] == ["malformed"]  # a task id with a NUL in it
    assert "task id" in kept[0]["detail"] and odd_id == "order\x00one"
    assert stats.outcomes["moved"] == 6 and dict(stats.reasons) == {"malformed": 1}


def test_a_drain_leaves_the_garbage_collector_as_it_found_it(qdsn: str, queue: str) -> None:
    with ms.producer(ms.REDIS_URL, queue) as p:
        for i in range(50):
            p.add.delay(i, i)
    thresholds = gc.get_threshold()
    frozen = gc.get_freeze_count()

    stats = ms.drain(qdsn, ms.REDIS_URL, [queue], batch=10)

    assert stats.outcomes["moved"] == 50
    assert (gc.get_threshold(), gc.get_freeze_count()) == (thresholds, frozen)
