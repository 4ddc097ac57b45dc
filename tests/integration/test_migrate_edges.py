"""Edges of ``ujobs-bridge migrate``: values Python or Postgres cannot hold, and one set of limits
for the sender and the drainer.

A RabbitMQ header whose AMQP timestamp is past what a datetime holds (2^63-1 seconds, year
10000) or a field table nested past what Python can recurse into is quarantined as
``malformed``, never taken for a broker outage: the valid message behind it moves, a one-shot
drain exits 0 and ``--follow`` does not loop on it. On Redis an ``eta``/``expires`` the engine
could not read back (year 10000 once in UTC, BC once in UTC, ``-infinity``) is quarantined,
never written as a row. The task-id length and header nesting limits are the same at the sender
(refused, ``UjobsError`` with a code) and at the drain (quarantined); ``--max-bytes`` counts
headers and properties.

Real RabbitMQ (a vhost of the module's own, made and deleted by the test kit), a
Redis database of the module's own on the test kit's Redis server, and Postgres.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from struct import pack
from typing import Any

import amqp
import amqp.serialization
import migrate_support as ms
import psycopg
import pytest
import redis
from cli_proc import CliProc
from migrate_support import qdsn  # noqa: F401 - fixture

from conftest import CI, wait_for
from migrate.batch import Context, classify
from migrate.decoding import Accept
from migrate.runner import SourceOptions, open_source
from ujobs_bridge.errors import ErrorCode, UjobsError
from ujobs_bridge.testing import RabbitVhost
from ujobs_bridge.testing import redis_url as kit_redis_url
from ujobs_bridge.testing.brokers import BrokerUnavailableError

REDIS_DB = 7  # on the test kit's Redis server: a database of this module's own
YEAR_10000 = 253402300800  # 10000-01-01T00:00:00Z in seconds
MAX_TASK_ID_BYTES = 1024  # the documented limits (celery_compat.sending.message_row)
MAX_HEADER_DEPTH = 64
HOURS_2 = timedelta(hours=2)


def _unavailable(reason: str) -> None:
    if CI:
        pytest.fail(reason)
    pytest.skip(reason)


_VHOSTS: dict[str, RabbitVhost] = {}


@pytest.fixture(scope="module")
def vhost() -> Iterator[str]:
    """A RabbitMQ vhost of this module's own, made and deleted by the test kit."""
    made = RabbitVhost(name=f"ujb-edges-{uuid.uuid4().hex[:8]}")
    try:
        made.create()
    except BrokerUnavailableError as exc:
        _unavailable(f"{exc.message}: {exc.hint}")
    _VHOSTS[made.name] = made
    try:
        yield made.name
    finally:
        _VHOSTS.pop(made.name, None)
        made.delete()


@pytest.fixture(scope="module")
def redis_url() -> str:
    """A Redis database on the test kit's Redis server (its queues are named per test, so
    nothing is flushed: under a given ``UJOBS_TEST_REDIS_URL`` the database is shared)."""
    return kit_redis_url(REDIS_DB)


def amqp_url(vhost: str) -> str:
    return _VHOSTS[vhost].url


def _amqp_connection(vhost: str) -> amqp.Connection:
    made = _VHOSTS[vhost]
    return amqp.Connection(
        f"{made.host}:{made.port}", userid=made.user, password=made.password, virtual_host=vhost
    )


class RawField:
    """A field-table value written as these bytes exactly (type octet included)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


def nested_table(levels: int) -> bytes:
    """An ``F`` value holding a table that holds a table ... ``levels`` deep."""
    table = b""
    for _ in range(levels):
        table = b"\x01k" + b"F" + pack(">I", len(table)) + table
    return b"F" + pack(">I", len(table)) + table


def publish_raw(
    monkeypatch: pytest.MonkeyPatch, vhost: str, queue: str, raw: bytes, task_id: str
) -> None:
    """A valid Celery protocol-v2 message whose header ``x-bad`` is ``raw`` on the wire."""
    write_item = amqp.serialization._write_item

    def raw_aware(v: Any, write: Any, bits: Any) -> None:
        if isinstance(v, RawField):
            write(v.raw)
        else:
            write_item(v, write, bits)

    monkeypatch.setattr(amqp.serialization, "_write_item", raw_aware)
    conn = _amqp_connection(vhost)
    conn.connect()
    try:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True, auto_delete=False)
        headers = {"task": "migrate_proj.add", "id": task_id, "lang": "py", "x-bad": RawField(raw)}
        body = json.dumps([[1, 2], {}, {"callbacks": None, "errbacks": None, "chain": None}])
        message = amqp.Message(
            body.encode(),
            content_type="application/json",
            content_encoding="utf-8",
            application_headers=headers,
        )
        channel.basic_publish(message, exchange="", routing_key=queue)
    finally:
        conn.close()
        monkeypatch.setattr(amqp.serialization, "_write_item", write_item)


def ready(vhost: str, queue: str) -> int:
    conn = _amqp_connection(vhost)
    conn.connect()
    try:
        return int(conn.channel().queue_declare(queue, passive=True).message_count)
    finally:
        conn.close()


def x_jobs_ids(dsn: str) -> set[str]:
    """The task ids of x_jobs rows, read with run_at (what the engine's claim reads)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = conn.execute(
            "select t.task_id, j.run_at from x_jobs j join x_celery_tasks t on t.job_id = j.id"
        ).fetchall()
    return {row[0] for row in got}


def quarantine_reasons(dsn: str) -> dict[str | None, str]:
    return {q["task_id"]: q["reason"] for q in ms.quarantined(dsn)}


BAD_AMQP_FIELDS = {
    "timestamp-2^63-1": b"T" + pack(">Q", 2**63 - 1),
    "timestamp-year-10000": b"T" + pack(">Q", YEAR_10000),
    "table-nested-past-recursion": nested_table(3000),
}


def _migrate_args(vhost: str, queue: str, dsn: str, *extra: str) -> list[str]:
    args = ["migrate", "-A", "apps.migrate_proj", "--broker", amqp_url(vhost), "-Q", queue]
    return [*args, "--dsn", dsn, *extra]


def _assert_no_outage(output: str) -> None:
    assert "migrate.outage" not in output, output
    assert "UJ_BROKER_UNAVAILABLE" not in output, output


@pytest.mark.parametrize("raw", list(BAD_AMQP_FIELDS.values()), ids=list(BAD_AMQP_FIELDS))
def test_an_amqp_header_python_cannot_hold_is_quarantined_and_the_next_message_moves(
    qdsn: str, vhost: str, raw: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = ms.unique("edge")
    bad_id = str(uuid.uuid4())
    publish_raw(monkeypatch, vhost, queue, raw, bad_id)
    with ms.producer(amqp_url(vhost), queue) as p:
        good_id = p.add.delay(2, 3).id
    proc = CliProc(_migrate_args(vhost, queue, qdsn, "--json"), tmp_path / "migrate.log")
    try:
        code = proc.wait(120)
    finally:
        proc.close()
    output = proc.output()
    assert code == 0, output
    _assert_no_outage(output)
    assert x_jobs_ids(qdsn) == {good_id}
    entries = ms.quarantined(qdsn)
    assert [e["reason"] for e in entries] == ["malformed"], entries
    assert "decode" in entries[0]["detail"], entries[0]["detail"]
    assert ready(vhost, queue) == 0


@pytest.mark.parametrize("raw", list(BAD_AMQP_FIELDS.values()), ids=list(BAD_AMQP_FIELDS))
def test_py_amqps_own_reads_classify_an_undecodable_header_as_malformed_and_go_on(
    vhost: str, raw: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delayed queues are read with py-amqp's ``basic_get`` (and so is the drain where the
    frame reader cannot be used): the header py-amqp cannot decode leaves that one message
    malformed, and the next one is read and classified as moved."""
    queue = ms.unique("edgep")
    bad_id = str(uuid.uuid4())
    publish_raw(monkeypatch, vhost, queue, raw, bad_id)
    with ms.producer(amqp_url(vhost), queue) as p:
        good_id = p.add.delay(2, 3).id
    info = ms.app_info()
    ctx = Context(info, Accept(), "this test's vhost", "amqp")  # recorded, never used
    source = open_source(amqp_url(vhost), info, SourceOptions([queue]))
    try:
        results = [classify(taken, ctx) for taken in source.read_and_return()]
    finally:
        source.close()
    assert [(r.outcome, r.reason) for r in results] == [
        ("quarantined", "malformed"),
        ("moved", None),
    ]
    assert "decode" in (results[0].taken.problem or ""), results[0].taken
    assert results[1].taken.envelope is not None
    assert results[1].taken.envelope.headers["id"] == good_id
    assert ready(vhost, queue) == 2  # read and returned: both still there


def test_follow_does_not_loop_on_an_amqp_timestamp_python_cannot_hold(
    qdsn: str, vhost: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = ms.unique("edgef")
    publish_raw(monkeypatch, vhost, queue, BAD_AMQP_FIELDS["timestamp-2^63-1"], str(uuid.uuid4()))
    with ms.producer(amqp_url(vhost), queue) as p:
        good_id = p.add.delay(4, 5).id
    args = _migrate_args(vhost, queue, qdsn, "--follow", "--poll", "0.1", "--json")
    proc = CliProc(args, tmp_path / "follow.log")
    try:
        wait_for(
            lambda: good_id in x_jobs_ids(qdsn) and ms.quarantined(qdsn),
            timeout=60,
            what="the valid message moved and the bad one quarantined",
        )
        proc.term()
        code = proc.wait(60)
    finally:
        proc.close()
    output = proc.output()
    assert code == 0, output
    _assert_no_outage(output)
    assert [e["reason"] for e in ms.quarantined(qdsn)] == ["malformed"]
    assert ready(vhost, queue) == 0


def _rewrite_headers(url: str, queue: str, changes: dict[str, dict[str, Any]]) -> None:
    """Set header values of the kombu envelopes in ``queue`` by task id."""
    client = redis.Redis.from_url(url)
    try:
        for index, raw in enumerate(client.lrange(queue, 0, -1)):
            envelope = json.loads(raw)
            update = changes.get(envelope["headers"]["id"])
            if update:
                envelope["headers"].update(update)
                client.lset(queue, index, json.dumps(envelope))
    finally:
        client.close()


UNREADABLE_INSTANTS = {
    "eta-year-10000-in-utc": {"eta": "9999-12-31T23:00:00-02:00"},
    "eta-bc-in-utc": {"eta": "0001-01-01T00:00:00+14:00"},
    "eta-year-10000": {"eta": "10000-01-01T00:00:00+00:00"},
    "eta-minus-infinity": {"eta": "-infinity"},
    "expires-bc-in-utc": {"expires": "0001-01-01T05:00:00+14:00"},
}


def test_redis_eta_and_expires_the_engine_cannot_read_are_quarantined_as_malformed(
    qdsn: str, redis_url: str
) -> None:
    queue = ms.unique("edger")
    with ms.producer(redis_url, queue) as p:
        bad = {
            p.add.delay(i, i).id: change for i, change in enumerate(UNREADABLE_INSTANTS.values())
        }
        good_id = p.add.delay(7, 8).id
    _rewrite_headers(redis_url, queue, bad)

    stats = ms.drain(qdsn, redis_url, [queue])

    assert stats.taken == len(bad) + 1
    assert x_jobs_ids(qdsn) == {good_id}  # every row readable, none of the bad ones written
    assert quarantine_reasons(qdsn) == dict.fromkeys(bad, "malformed")


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"k": value}
    return value


def test_the_sender_and_the_drain_share_the_task_id_and_header_depth_limits(
    qdsn: str, redis_url: str
) -> None:
    from apps import celery_tasks as t
    from apps.celery_harness import bound

    longest, too_long = "i" * MAX_TASK_ID_BYTES, "i" * (MAX_TASK_ID_BYTES + 1)
    deepest, too_deep = _nested(MAX_HEADER_DEPTH), _nested(MAX_HEADER_DEPTH + 1)
    with bound(t.app, qdsn):
        t.add.apply_async((1, 2), task_id=longest)
        t.add.apply_async((1, 2), headers={"deep": deepest})
        with pytest.raises(UjobsError) as refused_id:
            t.add.apply_async((1, 2), task_id=too_long)
        with pytest.raises(UjobsError) as refused_depth:
            t.add.apply_async((1, 2), headers={"deep": too_deep})
        with pytest.raises(UjobsError) as refused_eta:  # year 10000 once in UTC
            t.add.apply_async((1, 2), eta=datetime(9999, 12, 31, 23, tzinfo=timezone(-HOURS_2)))
    assert refused_id.value.code == ErrorCode.JOB_OPTION_INVALID and refused_id.value.hint
    assert str(MAX_TASK_ID_BYTES) in refused_id.value.message
    assert refused_depth.value.code == ErrorCode.PAYLOAD_TOO_DEEP and refused_depth.value.hint
    assert refused_eta.value.code == ErrorCode.JOB_OPTION_INVALID
    assert too_long not in x_jobs_ids(qdsn)

    queue = ms.unique("edgel")
    with ms.producer(redis_url, queue) as p:
        moved_id = p.add.apply_async((1, 2), task_id="j" * MAX_TASK_ID_BYTES).id
        p.add.apply_async((1, 2), task_id=too_long)
        deep_ok = p.add.apply_async((1, 2), headers={"deep": deepest}).id
        deep_bad = p.add.apply_async((1, 2), headers={"deep": too_deep}).id
        very_deep = p.add.apply_async((1, 2), headers={"deep": _nested(900)}).id

    ms.drain(qdsn, redis_url, [queue])

    assert {moved_id, deep_ok} <= x_jobs_ids(qdsn)
    assert quarantine_reasons(qdsn) == {
        too_long: "malformed",
        deep_bad: "malformed",
        very_deep: "malformed",
    }
    from celery_compat.sending import message_row

    assert (message_row.MAX_TASK_ID_BYTES, message_row.MAX_HEADER_DEPTH) == (1024, 64)


def test_max_bytes_counts_headers_on_redis_and_rabbitmq(
    qdsn: str, redis_url: str, vhost: str
) -> None:
    limit = 100_000
    accept = Accept.parse(["json"], pickle=False, max_bytes=limit)
    for url, header in ((redis_url, "x" * 150_000), (amqp_url(vhost), "x" * (limit + 10))):
        ms.ensure_quarantine(qdsn)
        queue = ms.unique("edgeb")
        with ms.producer(url, queue) as p:
            big = p.add.apply_async((1, 2), headers={"big": header}).id
            small = p.add.delay(3, 4).id
        ms.drain(qdsn, url, [queue], accept=accept)
        assert small in x_jobs_ids(qdsn), url
        assert big not in x_jobs_ids(qdsn), url
        assert quarantine_reasons(qdsn) == {big: "too_large"}, url
