"""Validation at the door: a job input or option the database (or JSON) cannot hold as it is is
refused at enqueue with a ``UJ_*`` code, where it is, and a hint, before any connection is
touched: nothing is inserted, and inside the caller's transaction that transaction goes on.

Through ``@job`` enqueue (default pool), ``configure(conn=...)`` (the caller's transaction),
``enqueue_many``, and the Celery API (``apply_async`` to a queue no bridge worker can consume,
also inside ``enqueue_in(conn)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from apps import celery_tasks as t
from apps.celery_harness import bound, celery_listeners_closed  # noqa: F401 - session cleanup
from celery_compat import enqueue_in
from ujobs_bridge import job
from ujobs_bridge._internal.jobs.payload import MAX_DEPTH
from ujobs_bridge.client import Client
from ujobs_bridge.errors import ConfigError, ErrorCode, PayloadError, UjobsError


@job(name="door.echo", queue="door-q")
def echo(*args: Any, **kwargs: Any) -> None:
    """Never run here: only enqueued."""


def _nested(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth - 1):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def _circular() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


# (label, args, kwargs, code, words the message must hold)
BAD_INPUTS: list[tuple[str, tuple[Any, ...], dict[str, Any], ErrorCode, str]] = [
    ("nan", (float("nan"),), {}, ErrorCode.PAYLOAD_NOT_JSON, "args[0] is NaN"),
    ("inf", (), {"x": [1, float("inf")]}, ErrorCode.PAYLOAD_NOT_JSON, "kwargs['x'][1] is Infinity"),
    ("-inf", (float("-inf"),), {}, ErrorCode.PAYLOAD_NOT_JSON, "is -Infinity"),
    ("nul", ("a\x00b",), {}, ErrorCode.PAYLOAD_TEXT_INVALID, "args[0] holds a NUL character"),
    ("nul key", (), {"d": {"k\x00": 1}}, ErrorCode.PAYLOAD_TEXT_INVALID, "NUL character"),
    ("surrogate", ("\udc00",), {}, ErrorCode.PAYLOAD_TEXT_INVALID, "lone surrogate"),
    ("int key", ({1: 2},), {}, ErrorCode.PAYLOAD_KEY_INVALID, "would come back as '1'"),
    ("deep", (_nested(MAX_DEPTH + 5),), {}, ErrorCode.PAYLOAD_TOO_DEEP, f"deeper than {MAX_DEPTH}"),
    ("deeper than Python", (_nested(5000),), {}, ErrorCode.PAYLOAD_TOO_DEEP, "deeper than"),
    ("circular", (_circular(),), {}, ErrorCode.PAYLOAD_NOT_JSON, "circular reference"),
    ("not JSON", (object(),), {}, ErrorCode.PAYLOAD_NOT_JSON, "not JSON-serialisable"),
]


def _count(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select count(*) from x_jobs").fetchone()
        return int(row[0]) if row else 0


@pytest.mark.parametrize(
    ("label", "args", "kwargs", "code", "words"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS]
)
def test_an_input_the_database_cannot_hold_is_refused_at_enqueue(
    client: Client,
    dsn: str,
    label: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    code: ErrorCode,
    words: str,
) -> None:
    with pytest.raises(PayloadError) as raised:
        echo.configure(client=client).enqueue(*args, **kwargs)
    assert raised.value.code == code and words in raised.value.message, raised.value.render()
    assert "door.echo" in raised.value.message and raised.value.hint
    with pytest.raises(PayloadError):
        client.enqueue_many([echo.call("fine"), echo.call(*args, **kwargs)])
    assert _count(dsn) == 0, "nothing inserted, not even the good one of the batch"


@pytest.mark.parametrize(
    ("label", "args", "kwargs", "code", "words"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS]
)
def test_a_refused_enqueue_leaves_the_callers_transaction_usable(
    dsn: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any], code: ErrorCode, words: str
) -> None:
    with psycopg.connect(dsn) as conn:
        echo.configure(conn=conn).enqueue("before")
        with pytest.raises(PayloadError):
            echo.configure(conn=conn).enqueue(*args, **kwargs)
        echo.configure(conn=conn).enqueue("after")  # the transaction was not aborted
        conn.commit()
    assert _count(dsn) == 2


BAD_OPTIONS: list[tuple[str, Callable[[], Any], str]] = [
    ("delay=1e300", lambda: echo.configure(delay=1e300), "delay is 1e+300s, more than"),
    ("expires=1e300", lambda: echo.configure(expires=1e300), "expires is 1e+300s, more than"),
    ("delay=inf", lambda: echo.configure(delay=float("inf")), "not a finite duration"),
    ("tenant_id=5", lambda: echo.configure(tenant_id=5), "tenant_id is int 5, not a string"),  # type: ignore[arg-type]
    ("tenant_id NUL", lambda: echo.configure(tenant_id="t\x00"), "tenant_id holds a NUL"),
    (
        "idempotency_key surrogate",
        lambda: echo.configure(idempotency_key="\ud800"),
        "lone surrogate",
    ),
    ("queue with a space", lambda: echo.configure(queue="my queue"), "queue name 'my queue'"),
    ("run_at not a datetime", lambda: echo.configure(run_at=5), "run_at must be a datetime"),  # type: ignore[arg-type]
    (
        "declared expires=1e300",
        lambda: job(name="door.x", expires=1e300)(lambda: None),
        "more than",
    ),
]


@pytest.mark.parametrize(("label", "make", "words"), BAD_OPTIONS, ids=[b[0] for b in BAD_OPTIONS])
def test_an_option_out_of_range_is_refused_with_a_hint(
    label: str, make: Callable[[], Any], words: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        make()
    assert words in raised.value.message and raised.value.hint, raised.value.render()
    assert raised.value.code in (
        ErrorCode.JOB_OPTION_INVALID,
        ErrorCode.QUEUE_NAME_INVALID,
        ErrorCode.CONFIG_INVALID,
    )


def test_good_values_still_go_in(client: Client, dsn: str) -> None:
    ref = echo.configure(
        client=client, delay=3600, tenant_id="acme", idempotency_key="k-1"
    ).enqueue("😀 emoji", "\\u0000 as text", {"nested": [[[]]]}, n=1.5)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select input, tenant_id from x_jobs where id = %s", (ref.id,)
        ).fetchone()
    assert row == (
        {"args": ["😀 emoji", "\\u0000 as text", {"nested": [[[]]]}], "kwargs": {"n": 1.5}},
        "acme",
    )


# -- the Celery API ------------------------------------------------------------------------------


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app


def test_a_celery_queue_no_worker_can_consume_is_refused_at_send(app: Any, dsn: str) -> None:
    with pytest.raises(UjobsError) as raised:
        t.add.apply_async((1, 2), queue="my queue")
    assert raised.value.code == ErrorCode.QUEUE_NAME_INVALID
    assert "'my queue'" in raised.value.message and "ujobs_broker_tasks" in raised.value.hint
    with psycopg.connect(dsn) as conn:
        with enqueue_in(conn):
            t.add.delay(1, 1)
            with pytest.raises(UjobsError):
                t.add.apply_async((1, 2), queue="my queue")
            t.add.delay(2, 2)  # the caller's transaction goes on
        conn.commit()
    assert _count(dsn) == 2
