"""The RabbitMQ drain reads deliveries with its own frame reader (``migrate.amqp_frames``): what
it makes of a message must be exactly what py-amqp makes of it. Messages carrying every AMQP
field type, a body split over several frames and an empty body are read once through py-amqp
(``--dry-run``'s ``basic_get``) and once through the reader (the drain's consumer), with reads
of the usual size and with reads of a few bytes (every frame arrives in pieces): the same bytes,
headers and properties. A delivery py-amqp cannot decode at all (properties that are not UTF-8:
py-amqp raises, which stopped the drain) is quarantined, and the drain goes on. Real RabbitMQ,
messages published with py-amqp and with real Celery."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

import amqp
import migrate_support as ms
import pytest
from migrate_support import qdsn  # noqa: F401 - shared fixture

from migrate import amqp_frames
from migrate.batch import Taken
from migrate.runner import SourceOptions, open_source

BIG = 300_000  # over RabbitMQ's default frame_max (131,072): three body frames


@pytest.fixture
def rabbit() -> Iterator[tuple[Any, str]]:
    try:
        conn = ms.amqp_connection()
        conn.connect()
    except OSError as exc:
        pytest.skip(f"RabbitMQ is not reachable: {exc}")
    channel = conn.channel()
    queue = f"drain-frames-{uuid.uuid4().hex[:10]}"
    channel.queue_declare(queue, durable=True, auto_delete=False)
    yield channel, queue
    channel.queue_delete(queue)
    conn.close()


def _headers(i: int) -> dict[str, Any]:
    tid = str(uuid.uuid4())
    return {
        "lang": "py",
        "task": "migrate_proj.record",
        "id": tid,
        "root_id": tid,
        "retries": i,
        "eta": None,
        "timelimit": [None, 30],
        "ignore_result": True,
        "stamps": {"nested": {"deeper": [1, "two", None, False]}},
        "big": 2**40,
        "negative": -(2**35),
        "ratio": 0.25,
        "price": Decimal("12.34"),
        "when": datetime(2026, 12, 1, 12, 30, 5),
        "not-utf8": b"\xff\xfe raw",
        "surrogate": "x\udc00y",
        "unicode": "žluťoučký 🐎",
        "empty": {},
    }


def _publish_variety(channel: Any, queue: str) -> int:
    bodies = [
        b'[["small"],{},{"callbacks":null,"errbacks":null,"chain":null,"chord":null}]',
        b'[["' + b"x" * BIG + b'"],{},{}]',
        b"",
    ]
    for i, body in enumerate(bodies * 3):
        channel.basic_publish(
            amqp.Message(
                body,
                content_type="application/json",
                content_encoding="utf-8",
                application_headers=_headers(i),
                delivery_mode=2,
                priority=i % 10,
                correlation_id=f"c{i}",
                reply_to="somewhere",
                expiration="3600000",
                message_id=f"m{i}",
                timestamp=1_700_000_000 + i,
                type="task",
                app_id="tests",
            ),
            exchange="",
            routing_key=queue,
        )
    return len(bodies) * 3


def _seen(items: list[Taken]) -> list[tuple[bytes, dict[str, Any]]]:
    """Each message's bytes and metadata, the redelivered flag left out (``read_and_return``
    gives back every message it read, so RabbitMQ marks them redelivered)."""
    out = []
    for taken in items:
        meta = dict(taken.meta or {})
        properties = dict(meta["properties"])
        properties["delivery_info"] = {
            k: v for k, v in properties["delivery_info"].items() if k != "redelivered"
        }
        meta["properties"] = properties
        out.append((taken.raw, meta))
    return out


@pytest.mark.parametrize("chunk", [amqp_frames.CHUNK, 97])
def test_the_frame_reader_reads_every_field_type_as_py_amqp_does(
    rabbit: tuple[Any, str], chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel, queue = rabbit
    count = _publish_variety(channel, queue)
    ms.wait_for_ready(queue, count)
    monkeypatch.setattr(amqp_frames, "CHUNK", chunk)

    source = open_source(ms.AMQP_URL, ms.app_info(), SourceOptions([queue], batch=4))
    try:
        through_py_amqp = list(source.read_and_return())
        through_reader: list[Taken] = []
        while len(through_reader) < count and (got := source.take(count)):
            through_reader.extend(got)
        assert source._reader is not None, "the drain reads deliveries with its own reader"
        source.acknowledge(through_reader)
    finally:
        source.close()

    assert len(through_py_amqp) == count
    assert _seen(through_reader) == _seen(through_py_amqp)
    headers = (through_reader[0].meta or {})["headers"]
    assert headers["not-utf8"] == b"\xff\xfe raw" and headers["surrogate"] == "x\udc00y"
    assert headers["price"] == Decimal("12.34") and headers["big"] == 2**40
    assert len(through_reader[1].raw) == BIG + 12 and through_reader[2].raw == b""
    assert all(t.envelope is not None for t in through_reader)


def test_a_delivery_whose_properties_do_not_decode_is_quarantined_and_the_drain_goes_on(
    qdsn: str, rabbit: tuple[Any, str]
) -> None:
    channel, queue = rabbit
    with ms.producer(ms.AMQP_URL, queue) as p:
        first = p.record.delay("before").id
        channel.basic_publish(  # py-amqp writes bytes as they are: not UTF-8 on the wire
            amqp.Message(b"[[],{},{}]", content_type=b"application/\xff\xfejson"),
            exchange="",
            routing_key=queue,
        )
        last = p.record.delay("after").id
    ms.wait_for_ready(queue, 3)

    stats = ms.drain(qdsn, ms.AMQP_URL, [queue], batch=2)

    assert stats.outcomes["moved"] == 2 and stats.reasons == {"malformed": 1}
    assert sorted(ms.ledger_ids(qdsn)) == sorted([first, last])
    [entry] = ms.quarantined(qdsn)
    assert entry["reason"] == "malformed" and "do not decode" in entry["detail"]
    assert bytes(entry["raw"]) == b"[[],{},{}]"
    assert ms.ready_count(queue) == 0, "every delivery acked, the poison one included"
