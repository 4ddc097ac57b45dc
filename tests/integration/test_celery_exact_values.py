"""Values round-trip exactly as through Celery's JSON serializer on Redis.

Every argument, keyword argument and result below goes through ``.delay().get()`` with a real
bridge worker and must come back as ``kombu.serialization`` ``dumps``/``loads`` (Celery's ``json``
serializer) gives it back: floats stay floats (``1e16``, ``2.5e20``, ``-0.0``), an overflow is
``inf``, big ints stay ints, NaN and ±Infinity survive, keyword order is kept, NUL characters and
lone surrogates survive. What cannot be stored raises kombu's ``EncodeError`` at the send, never
a database error, and inside ``enqueue_in(conn)`` it leaves the caller's transaction usable. A
result that cannot be stored is a FAILURE that says why; the worker goes on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from celery import states
from kombu.exceptions import EncodeError
from kombu.serialization import dumps, loads

from apps import celery_sends as s
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    worker,
)
from celery_compat import enqueue_in


def through_celery_json(value: Any) -> Any:
    """What Celery + Redis hands a task (or ``get()``): kombu's json serializer, both ways."""
    content_type, encoding, data = dumps(value, serializer="json")
    return loads(data, content_type, encoding)


def text(value: Any) -> str:
    """Exact comparison (float vs int, -0.0, NaN, key order): the serializer's own text."""
    return str(dumps(value, serializer="json")[2])


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    s.RAN.clear()
    with bound(s.app, dsn), worker(s.app, dsn, queues=("sends",)):
        yield s.app


VALUES = [
    pytest.param(1e16, id="1e16"),
    pytest.param(2.5e20, id="2.5e20"),
    pytest.param(-0.0, id="negative-zero"),
    pytest.param(0.1 + 0.2, id="shortest-repr"),
    pytest.param(2**100, id="big-int"),
    pytest.param(-(2**70) + 1, id="big-negative-int"),
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("inf"), id="infinity"),
    pytest.param(float("-inf"), id="minus-infinity"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("\ud800 lone", id="lone-surrogate"),
    pytest.param("\U0001f600 é", id="non-bmp"),
    pytest.param({"b": 1, "a": [1.0, 1e-7, {"z": None, "y": True}]}, id="key-order"),
    pytest.param(Decimal("1.10"), id="decimal"),
]


@pytest.mark.parametrize("value", VALUES)
def test_an_argument_and_its_result_round_trip_as_through_celerys_json(
    app: Any, value: Any
) -> None:
    got = s.identity.delay(value).get(timeout=30)
    assert text(got) == text(through_celery_json(value))
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(got)
    elif isinstance(value, float):
        assert type(got) is float and math.copysign(1, got) == math.copysign(1, value)


def test_arithmetic_on_floats_is_float_arithmetic(app: Any) -> None:
    total = s.xsum.delay([1e16]).get(timeout=30)
    assert (total, type(total)) == (1e16, float)
    assert s.mul.delay(1e308, 10).get(timeout=30) == float("inf")
    assert math.isnan(s.add.delay(float("nan"), 1).get(timeout=30))
    assert s.mul.delay(2**64, 2**64).get(timeout=30) == 2**128


def test_keyword_order_and_positional_types_reach_the_body(app: Any) -> None:
    got = s.echo.delay(1e16, "x\x00", zeta=1, alpha=2.5e20).get(timeout=30)
    assert text(got) == text([[1e16, "x\x00"], {"zeta": 1, "alpha": 2.5e20}])
    assert list(got[1]) == ["zeta", "alpha"]


def test_what_json_cannot_carry_is_refused_at_the_send_with_encode_error(
    app: Any, dsn: str
) -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(EncodeError, match="cannot be serialized"):
        s.identity.delay(object())
    with pytest.raises(EncodeError, match="circular"):
        s.identity.delay(loop)
    with pytest.raises(EncodeError, match="header"):
        s.identity.apply_async((1,), headers={"x-when": object()})
    with pytest.raises(EncodeError, match="task id"):
        s.identity.apply_async((1,), task_id="a\x00b")
    assert jobs(dsn) == []


def test_headers_jsonb_cannot_hold_are_kept_too(app: Any, dsn: str) -> None:
    odd = s.headers_of.apply_async(headers={"x-weight": float("nan"), "x-note": "a\x00b"})
    got = odd.get(timeout=30)
    assert math.isnan(got["x-weight"]) and got["x-note"] == "a\x00b"
    (row,) = [r for r in jobs(dsn) if r["name"] == s.headers_of.name]
    assert row["input"]["id"] == odd.id  # the task id stays readable in SQL (and indexed)


@pytest.mark.parametrize("batch", [False, True], ids=["row-by-row", "batch"])
def test_a_refused_send_inside_a_transaction_leaves_the_transaction_usable(
    app: Any, dsn: str, batch: bool
) -> None:
    with psycopg.connect(dsn) as conn:
        with enqueue_in(conn, batch=batch):
            kept = s.identity.delay(1e16)
            with pytest.raises(EncodeError):
                s.identity.delay(object())
            with pytest.raises(EncodeError):
                s.identity.apply_async((1,), headers={"x-when": object()})
            also = s.identity.delay(float("nan"))
            assert conn.execute("select 1").fetchone() == (1,)  # not aborted
        conn.commit()
    assert kept.get(timeout=30) == 1e16 and math.isnan(also.get(timeout=30))
    assert len(jobs(dsn)) == 2


@pytest.mark.parametrize("kind", ["object", "circular"])
def test_a_result_that_cannot_be_stored_is_a_failure_that_says_why(app: Any, kind: str) -> None:
    result = s.returns_unstorable.delay(kind)
    with pytest.raises(Exception) as raised:
        result.get(timeout=30)
    assert result.state == states.FAILURE
    assert "EncodeError" in type(raised.value).__name__ or "serializ" in str(raised.value).lower()
    assert s.identity.delay(1e16).get(timeout=30) == 1e16  # the worker goes on
