"""``ujobs-bridge migrate`` on RabbitMQ, with messages published by real Celery 5: classic and
quorum queues drained with acks sent only after commit; ``--dry-run`` counts without reading,
so every message stays in place and is not marked redelivered; a drainer SIGKILLed between commit and ack, restarted: each message once, the queue
empty; the ``celery_delayed_*`` queues of native delayed delivery drained into the right queue,
other queues' delayed messages left alone."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import amqp
import migrate_support as ms
import pytest
from cli_proc import CliProc
from click.testing import CliRunner
from kombu import Connection, Exchange, Queue
from kombu.transport.native_delayed_delivery import (
    bind_queue_to_native_delayed_delivery_exchange,
    declare_native_delayed_delivery_exchanges_and_queues,
)

from conftest import wait_for
from migrate.amqp_drain import DELAYED_QUEUES
from migrate.batch import Context
from migrate.decoding import Accept
from migrate.report import Stats
from migrate.runner import SourceOptions, dry_run, open_source
from ujobs_bridge._internal.cli import cli


def _channel() -> tuple[amqp.Connection, Any]:
    conn = ms.amqp_connection()
    try:
        conn.connect()
    except OSError as exc:
        pytest.skip(f"RabbitMQ is not reachable: {exc}")
    return conn, conn.channel()


def ready(queue: str) -> int:
    conn, ch = _channel()
    try:
        return int(ch.queue_declare(queue, passive=True).message_count)
    finally:
        conn.close()


@pytest.fixture
def queues() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    conn, ch = _channel()
    try:
        for name in names:
            ch.queue_delete(name)
            ch.exchange_delete(name)
    finally:
        conn.close()


@pytest.fixture
def qdsn(dsn: str) -> str:
    ms.ensure_quarantine(dsn)
    return dsn


def quorum(name: str, exchange_type: str = "direct") -> Queue:
    return Queue(
        name,
        Exchange(name, type=exchange_type),
        routing_key=name,
        queue_arguments={"x-queue-type": "quorum"},
    )


def test_classic_and_quorum_queues_drain_once_each_with_acks_after_commit_and_dry_run_first(
    qdsn: str, queues: list[str]
) -> None:
    classic, qq = ms.unique("aq"), ms.unique("aqq")
    queues.extend([classic, qq])
    expected: Counter[str] = Counter()
    with ms.producer(ms.AMQP_URL, classic) as p:
        for i in range(250):
            expected[p.add.delay(i, i).id] += 1
        for i in range(50):
            expected[
                p.add.apply_async((i, 0), countdown=3600, priority=5, headers={"x-tenant": "a"}).id
            ] += 1
    with ms.producer(ms.AMQP_URL, qq, task_queues=[quorum(qq)]) as p:
        for i in range(100):
            expected[p.record.delay(f"q{i}").id] += 1
    assert (ready(classic), ready(qq)) == (300, 100)

    info = ms.app_info()
    source = open_source(ms.AMQP_URL, info, SourceOptions([classic, qq]))
    try:
        ctx = Context(info, Accept(), "amqp://guest:****@127.0.0.1:5672//", "amqp")
        preview = dry_run(source, ctx, Stats(dry_run=True))
    finally:
        source.close()
    assert (preview.counted, preview.taken, preview.remaining) == ({classic: 300, qq: 100}, 0, 400)
    assert (ready(classic), ready(qq)) == (300, 100), "a dry run leaves every message"

    stats = ms.drain(qdsn, ms.AMQP_URL, [classic, qq], batch=100)

    assert stats.outcomes["moved"] == 400 and not stats.reasons
    assert stats.redelivered == 0, "the dry run marked nothing redelivered"
    assert Counter(ms.ledger_ids(qdsn)) == expected
    assert (ready(classic), ready(qq)) == (0, 0), "acked: nothing came back when the drainer left"
    rows = ms.rows(qdsn)
    assert Counter(row["queue"] for row in rows) == {classic: 300, qq: 100}
    delivered = [row["input"]["properties"]["delivery_info"] for row in rows]
    assert {d["redelivered"] for d in delivered} == {False}  # what each task will see
    delayed = [row for row in rows if row["input"]["headers"].get("x-tenant") == "a"]
    assert len(delayed) == 50 and all(row["priority"] == 5 for row in delayed)
    assert all(row["run_at"] > datetime.now(UTC) + timedelta(minutes=55) for row in delayed)


def test_a_drainer_killed_between_commit_and_ack_restarts_and_still_moves_each_message_once(
    qdsn: str, queues: list[str], tmp_path: Path
) -> None:
    queue = ms.unique("ak")
    queues.append(queue)
    with ms.producer(ms.AMQP_URL, queue) as p:
        ids = [p.record.delay(f"m{i}").id for i in range(600)]
    seed = random.randrange(1_000_000)
    kill_at = random.Random(seed).randint(1, 10)
    args = [
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        ms.AMQP_URL,
        "-Q",
        queue,
        "--batch",
        "50",
        "--json",
        "--dsn",
        qdsn,
    ]
    first = CliProc(args, tmp_path / "first.log", faults=f"migrate.after_commit=kill@{kill_at}")
    try:
        assert first.wait(60) == -9, first.output()
    finally:
        first.close()
    assert len(ms.rows(qdsn)) == 50 * kill_at, f"seed {seed}"

    second = CliProc(args, tmp_path / "second.log")
    try:
        assert second.wait(60) == 0, second.output()
    finally:
        second.close()
    out = second.output()
    report = json.loads(out[out.index("{") :])
    assert Counter(ms.ledger_ids(qdsn)) == Counter(ids), f"seed {seed}"
    assert report["duplicate"] == 50 and report["redelivered"] >= 50, "the unacked batch came back"
    assert report["moved"] == 600 - 50 * kill_at
    assert ready(queue) == 0


@pytest.fixture
def delayed_topology() -> Iterator[None]:
    """Celery's native delayed delivery exchanges/queues (what a Celery 5.5+ worker declares).
    Declared if missing; removed afterwards only if this fixture created them and they are empty
    (a queue still holding another queue's delayed message is left to expire it)."""
    conn, ch = _channel()
    existed = set()
    for name in DELAYED_QUEUES:
        probe = conn.channel()
        try:
            probe.queue_declare(name, passive=True)
            existed.add(name)
            probe.close()
        except amqp.exceptions.NotFound:
            pass
    conn.close()
    with Connection(ms.AMQP_URL) as kconn:
        declare_native_delayed_delivery_exchanges_and_queues(kconn, "quorum")
    yield
    conn, ch = _channel()
    try:
        for name in DELAYED_QUEUES:
            if name not in existed and not ch.queue_declare(name, passive=True).message_count:
                ch.queue_delete(name)
    finally:
        conn.close()


def test_native_delayed_delivery_queues_are_drained_into_the_destination_queue(
    qdsn: str, queues: list[str], delayed_topology: None
) -> None:
    queue = ms.unique("adl")
    queues.append(queue)
    topic = quorum(queue, "topic")
    with ms.producer(ms.AMQP_URL, queue, task_queues=[topic]) as p:
        with Connection(ms.AMQP_URL) as kconn:
            kconn.default_channel  # noqa: B018 - open it
            topic.bind(kconn.default_channel).declare()
            bind_queue_to_native_delayed_delivery_exchange(kconn, topic)
        later = [p.record.apply_async((f"later{i}",), countdown=3600 + i).id for i in range(3)]
        now = [p.record.delay(f"now{i}").id for i in range(2)]
    other = ms.unique("adl-other")  # another queue's delayed message shares celery_delayed_*
    queues.append(other)
    with ms.producer(ms.AMQP_URL, other, task_queues=[quorum(other, "topic")]) as p:
        foreign = p.record.apply_async(("foreign",), countdown=40).id
    # RabbitMQ counts a queue's messages asynchronously: wait until the two immediate ones show.
    wait_for(lambda: ready(queue) >= 2, timeout=10, what="the two immediate messages queued")
    assert ready(queue) == 2, "countdown messages wait in celery_delayed_*, not in the queue"

    stats = ms.drain(qdsn, ms.AMQP_URL, [queue])

    assert Counter(ms.ledger_ids(qdsn)) == Counter(later + now)
    assert foreign not in ms.ledger_ids(qdsn) and stats.taken == 5
    rows = {row["task_id"]: row for row in ms.rows(qdsn)}
    assert {rows[i]["queue"] for i in later} == {queue}
    assert all(rows[i]["run_at"] > datetime.now(UTC) + timedelta(minutes=55) for i in later)
    assert ready(queue) == 0


def test_follow_on_rabbitmq_moves_messages_published_while_it_waits_and_sigterm_exits_cleanly(
    qdsn: str, queues: list[str], tmp_path: Path
) -> None:
    queue = ms.unique("af")
    queues.append(queue)
    args = ["migrate", "-A", "apps.migrate_proj", "--broker", ms.AMQP_URL, "-Q", queue]
    args += ["--follow", "--poll", "0.1", "--json", "--dsn", qdsn]
    with ms.producer(ms.AMQP_URL, queue) as p:
        first = p.record.delay("first").id
        proc = CliProc(args, tmp_path / "follow.log")
        try:
            wait_for(lambda: first in ms.ledger_ids(qdsn), timeout=60, what="the drainer to start")
            later = [p.record.delay(f"later{i}").id for i in range(300)]
            wait_for(
                lambda: set(later) <= set(ms.ledger_ids(qdsn)),
                timeout=60,
                what="the messages published while the drainer waited",
            )
            proc.term()
            assert proc.wait(60) == 0, proc.output()
        finally:
            proc.close()
    out = proc.output()
    report = json.loads(out[out.index("{") :])
    assert (report["moved"], report["stopped_by_signal"]) == (301, True)
    assert Counter(ms.ledger_ids(qdsn)) == Counter([first, *later])
    assert ready(queue) == 0, "every delivery acked before the exit"


def test_the_dry_run_says_it_counted_without_reading_and_reads_nothing(
    qdsn: str, queues: list[str]
) -> None:
    """``migrate --dry-run`` on RabbitMQ, as an operator runs it: the ready count per queue by
    passive declare, said to be counted and not read, in the table and in ``--json``; a drain
    afterwards finds every message unread (``redelivered`` False)."""
    queue = ms.unique("adry")
    queues.append(queue)
    with ms.producer(ms.AMQP_URL, queue) as p:
        for i in range(5):
            p.add.delay(i, i)
    args = ["migrate", "-A", "apps.migrate_proj", "--broker", ms.AMQP_URL, "-Q", queue]
    runner = CliRunner(env={"COLUMNS": "200"})
    as_json = runner.invoke(cli, [*args, "--dry-run", "--json", "--dsn", qdsn])
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.output[as_json.output.index("{") :])
    assert (report["counted"][queue], report["read"], report["taken"]) == (5, 0, 0)
    # ETA messages of native delayed delivery are counted per celery_delayed_* queue (unread:
    # their destination is in the routing key); other tests may have left some there
    assert all(q.startswith("celery_delayed_") for q in report["counted"] if q != queue)
    assert "no message was read or sampled" in report["how"]
    table = " ".join(runner.invoke(cli, [*args, "--dry-run", "--dsn", qdsn]).output.split())
    assert "message(s) ready" in table and "nothing was changed" in table and queue in table
    assert "passive queue.declare" in table and "no message was read" in table
    assert ready(queue) == 5

    stats = ms.drain(qdsn, ms.AMQP_URL, [queue])
    assert (stats.outcomes["moved"], stats.redelivered) == (5, 0)
