"""``ujobs-bridge migrate`` on Redis, with messages published by real Celery 5: thousands drained
with every task id exactly once and the rows shaped as celery_compat makes them; a drainer
SIGKILLed between commit and LREM, restarted, still exactly once with the broker and its
processing list empty; ``global_keyprefix``, priority sub-lists, ``--all-queues`` and kombu's
``unacked`` hash (left alone unless ``--restore-unacked``); ``--follow`` with SIGTERM."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import migrate_support as ms
import redis
from celery import chain
from cli_proc import CliProc
from migrate_support import qdsn, queue, r  # noqa: F401 - shared fixtures

from apps.celery_harness import body_of
from conftest import wait_for


def broker_keys(r: redis.Redis, queue: str) -> dict[str, int]:
    """Every Redis list holding messages of ``queue`` (queue lists and processing lists)."""
    out = {}
    for key in r.scan_iter(match=f"*{queue}*", count=1000):
        if r.type(key) == b"list":
            out[key.decode("utf-8", "replace")] = int(r.llen(key))
    return {k: n for k, n in out.items() if n}


def test_2000_messages_from_real_celery_become_one_row_each_shaped_like_the_facade_rows(
    qdsn: str, r: redis.Redis, queue: str
) -> None:
    eta = datetime(2031, 1, 1, tzinfo=UTC)
    expected: Counter[str] = Counter()
    kinds: dict[str, str] = {}
    with ms.producer(ms.REDIS_URL, queue) as p:

        def sent(result: Any, kind: str) -> None:
            expected[result.id] += 1
            kinds[result.id] = kind

        for i in range(1400):
            sent(p.add.delay(i, i), "plain")
        for i in range(200):
            sent(p.add.apply_async((i, 0), countdown=3600), "countdown")
        for i in range(100):
            sent(p.add.apply_async((i, 1), eta=eta), "eta")
        for i in range(100):
            sent(p.add.apply_async((i, 2), expires=3600), "expires")
        for i in range(100):
            sent(p.add.apply_async((i, 3), priority=i % 10), f"priority{i % 10}")
        for i in range(50):
            sent(p.add.apply_async((i, 4), headers={"x-tenant": f"t{i}"}), "headers")
        for i in range(50):
            first = chain(p.add.s(i, 5), p.mul.s(2)).apply_async()
            sent(first.parent, "chain")  # only the first step is a message; mul rides in its chain
    assert sum(broker_keys(r, queue).values()) == 2000
    assert len(r.keys(f"{queue}\x06\x16*")) == 3  # priorities 3-5, 6-8, 9 have their own lists

    stats = ms.drain(qdsn, ms.REDIS_URL, [queue])

    assert (stats.outcomes["moved"], stats.taken, dict(stats.reasons)) == (2000, 2000, {})
    assert broker_keys(r, queue) == {}, "queue lists and the processing list are empty"
    rows = ms.rows(qdsn)
    assert Counter(row["task_id"] for row in rows) == expected  # every id once, nothing else
    by_id = {row["task_id"]: row for row in rows}
    now = datetime.now(UTC)
    for task_id, kind in kinds.items():
        row = by_id[task_id]
        assert (row["name"], row["queue"], row["state"]) == ("migrate_proj.add", queue, "ready")
        headers = row["input"]["headers"]
        assert headers["id"] == task_id and headers["task"] == "migrate_proj.add"
        if kind == "countdown":
            assert timedelta(minutes=55) < row["run_at"] - now < timedelta(minutes=61)
        elif kind == "eta":
            assert row["run_at"] == eta
        else:
            assert row["run_at"] <= now + timedelta(seconds=5)
        if kind == "expires":
            assert datetime.fromisoformat(headers["expires"]) > now
        if kind.startswith(
            "priority"
        ):  # Redis: 0 is the most urgent; the bridge: higher runs first
            assert row["priority"] == 9 - int(kind[-1])
        if kind == "headers":
            assert headers["x-tenant"].startswith("t")
        if kind == "chain":
            (step,) = body_of(row)["embed"]["chain"]
            assert step["task"] == "migrate_proj.mul" and step["args"] == [2]
    plain = next(by_id[t] for t, k in kinds.items() if k == "plain")
    assert set(plain["input"]) == {"body", "headers", "properties"}


def _published(p: Any, n: int) -> list[str]:
    ids = [p.record.delay(f"m{i}").id for i in range(n)]
    return ids


def test_a_drainer_killed_between_commit_and_lrem_restarts_and_still_moves_each_message_once(
    qdsn: str, r: redis.Redis, queue: str, tmp_path: Path
) -> None:
    with ms.producer(ms.REDIS_URL, queue) as p:
        ids = _published(p, 1000)
    seed = random.randrange(1_000_000)
    kill_at = random.Random(seed).randint(2, 14)  # after the k-th committed batch of 50
    args = [
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        ms.REDIS_URL,
        "-Q",
        queue,
        "--batch",
        "50",
        "--drainer-id",
        f"d-{queue}",
        "--json",
        "--dsn",
        qdsn,
    ]
    first = CliProc(args, tmp_path / "first.log", faults=f"migrate.after_commit=kill@{kill_at}")
    try:
        assert first.wait(60) == -9, first.output()
    finally:
        first.close()
    held = {k: n for k, n in broker_keys(r, queue).items() if "_ujobs.migrate" in k}
    assert sum(held.values()) >= 50, f"seed {seed}: the killed batch is still held ({held})"
    assert len(ms.rows(qdsn)) == 50 * kill_at

    second = CliProc(args, tmp_path / "second.log")
    try:
        assert second.wait(60) == 0, second.output()
    finally:
        second.close()
    report = json.loads(second.output()[second.output().index("{") :])
    assert Counter(ms.ledger_ids(qdsn)) == Counter(ids), f"seed {seed}"
    assert len(ms.rows(qdsn)) == 1000
    assert report["duplicate"] == 50, "the committed-but-unremoved batch was absorbed by the ledger"
    assert report["moved"] == 1000 - 50 * kill_at
    assert broker_keys(r, queue) == {}, "broker lists and processing lists empty"


def test_two_live_drainers_with_one_id_never_adopt_each_others_batch_until_its_owner_dies(
    qdsn: str, r: redis.Redis, queue: str, tmp_path: Path
) -> None:
    """Drainer A (one ``--drainer-id``, as two drainers on one host get by default) takes a batch
    and is paused before its commit; drainer B, same id, same Redis, starts and drains: it
    leaves A's batch to A (A lives). Once A is SIGKILLed, the next drainer adopts its batch at
    once: every message moved once, the broker and the processing lists empty."""
    with ms.producer(ms.REDIS_URL, queue) as p:
        ids = _published(p, 100)
    args = ["migrate", "-A", "apps.migrate_proj", "--broker", ms.REDIS_URL, "-Q", queue]
    args += ["--batch", "20", "--drainer-id", "one-host", "--json", "--dsn", qdsn]

    def held() -> dict[str, int]:
        return {k: n for k, n in broker_keys(r, queue).items() if "_ujobs.migrate" in k}

    def report(proc: CliProc) -> dict[str, Any]:
        out = proc.output()
        return dict(json.loads(out[out.index("{") :]))

    a = CliProc(args, tmp_path / "a.log", faults="migrate.after_take=pause")
    b = c = None
    try:
        wait_for(a.stopped, timeout=60, what="drainer A paused with a batch in hand")
        a_batch = held()
        assert list(a_batch.values()) == [20], a_batch
        b = CliProc(args, tmp_path / "b.log")
        assert b.wait(60) == 0, b.output()
        assert report(b)["moved"] == 80
        assert held() == a_batch, "B left the live drainer's batch alone"
        assert len(ms.ledger_ids(qdsn)) == 80
        a.kill()
        a.wait(20)
        c = CliProc(args, tmp_path / "c.log")
        assert c.wait(60) == 0, c.output()
        assert report(c)["moved"] == 20  # A is gone: its batch adopted at once, no expiry wait
    finally:
        for proc in (a, b, c):
            if proc is not None:
                proc.close()
    assert Counter(ms.ledger_ids(qdsn)) == Counter(ids)
    assert broker_keys(r, queue) == {}, "broker lists and processing lists empty"


def test_key_prefix_priority_lists_all_queues_and_the_unacked_hash(
    qdsn: str, r: redis.Redis
) -> None:
    prefix = f"{ms.unique('pfx')}:"
    options = {"global_keyprefix": prefix}
    q1, q2 = ms.unique("pq"), ms.unique("pq")
    try:
        with ms.producer(ms.REDIS_URL, q1, broker_transport_options=options) as p:
            low = p.add.apply_async((1, 1), priority=9).id
            high = p.add.apply_async((1, 2), priority=0).id
            mid = p.add.apply_async((1, 3), priority=5).id
            other = p.add.apply_async((2, 2), queue=q2).id
            held = p.add.apply_async((3, 3), queue=q2).id
        # A Celery worker took `held` (kombu: RPOP, then HSET unacked) and is still working on it.
        raw = r.rpop(f"{prefix}{q2}")
        assert json.loads(raw)["headers"]["id"] == other  # oldest first
        r.lpush(f"{prefix}{q2}", raw)
        raw_held = r.rpop(f"{prefix}{q2}")
        assert json.loads(raw_held)["headers"]["id"] == held
        r.hset(f"{prefix}unacked", "tag-1", json.dumps([json.loads(raw_held), q2, q2]))
        r.zadd(f"{prefix}unacked_index", {"tag-1": time.time()})
        info = ms.app_info(transport_options=options)

        stats = ms.drain(qdsn, ms.REDIS_URL, None, info=info, all_queues=True)
        assert set(stats.queues) >= {q1, q2}, "queues discovered from the prefixed kombu bindings"
        assert Counter(ms.ledger_ids(qdsn)) == Counter([low, high, mid, other])
        assert r.hlen(f"{prefix}unacked") == 1, "a live worker's message is not ours to take"
        priorities = {row["task_id"]: row["priority"] for row in ms.rows(qdsn)}
        assert priorities[high] > priorities[mid] > priorities[low]

        stats = ms.drain(qdsn, ms.REDIS_URL, [q2], info=info, restore_unacked=True)
        assert stats.outcomes["moved"] == 1 and stats.redelivered == 0
        assert held in ms.ledger_ids(qdsn)
        assert (r.hlen(f"{prefix}unacked"), r.zcard(f"{prefix}unacked_index")) == (0, 0)
        assert [k for k in r.scan_iter(match=f"{prefix}*") if r.type(k) == b"list"] == []
    finally:
        ms.clean_redis(r, prefix)


def test_follow_moves_new_messages_promptly_and_sigterm_exits_cleanly(
    qdsn: str, r: redis.Redis, queue: str, tmp_path: Path
) -> None:
    args = [
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        ms.REDIS_URL,
        "-Q",
        queue,
        "--follow",
        "--poll",
        "0.1",
        "--json",
        "--dsn",
        qdsn,
    ]
    proc = CliProc(args, tmp_path / "follow.log")
    try:
        with ms.producer(ms.REDIS_URL, queue) as p:
            first = p.record.delay("first").id
            wait_for(lambda: first in ms.ledger_ids(qdsn), timeout=20, what="the drainer to start")
            started = time.monotonic()
            second = p.record.delay("second").id
            wait_for(lambda: second in ms.ledger_ids(qdsn), timeout=5, what="a followed message")
            latency = time.monotonic() - started
        assert latency < 2.0, f"publish → row took {latency:.2f}s with --poll 0.1"
        proc.term()
        assert proc.wait(20) == 0, proc.output()
    finally:
        proc.close()
    out = proc.output()
    report = json.loads(out[out.index("{") :])
    assert (report["moved"], report["stopped_by_signal"]) == (2, True)
    assert broker_keys(r, queue) == {}


def test_a_celery_worker_and_the_drainer_share_a_broker_without_touching_each_others_queues(
    qdsn: str, r: redis.Redis, tmp_path: Path
) -> None:
    celery_q, bridge_q = ms.unique("cw"), ms.unique("dq")
    ran = tmp_path / "celery-ran.txt"
    ran.touch()
    gate = ms.unique("gate")  # the Celery worker waits in its first task until this is pushed
    env = dict(
        os.environ,
        MIGRATE_TEST_BROKER=ms.REDIS_URL,
        MIGRATE_TEST_OUT=str(ran),
        MIGRATE_TEST_GATE=gate,
    )
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
    )
    log = (tmp_path / "celery.log").open("w")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "apps.migrate_celery_worker",
            "worker",
            "-Q",
            celery_q,
            "--pool",
            "solo",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "WARNING",
        ],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        for_celery: list[str] = []
        for_bridge: list[str] = []
        with ms.producer(ms.REDIS_URL, celery_q) as p:
            for i in range(300):  # interleaved, while the Celery worker is consuming
                for_celery.append(p.record.delay(f"c{i}").id)
                for_bridge.append(p.record.apply_async((f"b{i}",), queue=bridge_q).id)
        wait_for(lambda: ran.read_text(), timeout=30, what="the Celery worker to start consuming")
        stats = ms.drain(qdsn, ms.REDIS_URL, [bridge_q])  # while Celery holds its first task
        busy = len(ran.read_text().split())
        r.rpush(gate, "go")
        wait_for(
            lambda: len(ran.read_text().split()) >= 300, timeout=30, what="Celery to run its queue"
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=20)
        log.close()
        ms.clean_redis(r, celery_q)
        ms.clean_redis(r, bridge_q)
        r.delete(gate)
        for pattern in (
            "_kombu.binding*pidbox*",
            "_kombu.binding*celeryev*",
            "_kombu.binding_deadlines",
        ):
            ms.clean_redis(r, pattern)  # what the Celery worker declared for its control/events
    assert stats.outcomes["moved"] == 300
    assert busy == 1, "the Celery worker was inside its first task while the drain ran"
    assert Counter(ms.ledger_ids(qdsn)) == Counter(for_bridge), "the drainer took only its queue"
    assert Counter(ran.read_text().split()) == Counter(for_celery), (
        "Celery ran only its queue, once each"
    )
