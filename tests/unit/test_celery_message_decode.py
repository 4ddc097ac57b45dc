"""A row's input decodes to what kombu's own decoding of Celery's JSON gives, value for value.

Why it exists: the worker reads each claimed row with ``message_row.from_input``, which avoids
the text round trip kombu would take (the body's text goes to the JSON scanner directly; the
headers and properties, already decoded by psycopg, are restored in place of being re-encoded)
and copies only what changes. These tests hold it to the slow, obviously right way: encode the
input as Celery does, decode it with ``kombu.utils.json.loads``. Pure: no database (the input is
what psycopg gives for the row's jsonb: ``json.loads`` of its text). The message owns every
list and dict it holds, so a task that changes its request never changes the claimed row.

What it is not: the end-to-end round trip through a worker (``test_celery_exact_values.py``).
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from kombu.utils import json as kombu_json

from celery_compat.sending.message_row import encode_input, from_input


def _headers(**extra: Any) -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    return {
        "lang": "py",
        "task": "t.noop",
        "id": task_id,
        "root_id": task_id,
        "parent_id": None,
        "retries": 0,
        "timelimit": [None, None],
        "stamps": {},
        "ignore_result": True,
        **extra,
    }


def _row(text: str) -> dict[str, Any]:
    value = json.loads(text)  # what psycopg hands the worker for the row's jsonb
    assert isinstance(value, dict)
    return value


def _slow(text: str) -> dict[str, Any]:
    """The reference: every part through kombu's own ``loads`` of its JSON text."""
    row = json.loads(text)
    args, kwargs, embed = kombu_json.loads(row["body"])

    def part(value: Any) -> Any:
        return kombu_json.loads(value if isinstance(value, str) else json.dumps(value))

    return {
        "headers": part(row["headers"]),
        "properties": part(row["properties"]),
        "args": args,
        "kwargs": kwargs,
        "embed": embed,
    }


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN included, and of the same types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


WHEN = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
CASES = {
    "plain no-op": (_headers(), {}, [], {}, None),
    "tagged values in args and kwargs": (
        _headers(),
        {"reply_to": "r"},
        [WHEN, uuid.UUID(int=7), Decimal("1.10"), b"raw", [WHEN, {"d": Decimal("2")}]],
        {"when": WHEN, "nested": {"deep": [b"\xff\x00"]}},
        {"callbacks": None, "errbacks": None, "chain": None, "chord": None},
    ),
    "tagged values in headers and properties": (
        _headers(stamps={"when": WHEN, "ids": [uuid.UUID(int=1)]}, custom={"at": WHEN}),
        {"correlation_id": "c", "application_headers": {"u": uuid.UUID(int=2)}},
        [1],
        {},
        None,
    ),
    "numbers JSON keeps exactly": (
        _headers(),
        {},
        [1e16, 10**30, -0.0, math.nan, math.inf, 0.1],
        {"big": 2**70},
        {},
    ),
    "a header jsonb cannot hold (kept as text)": (
        _headers(argsrepr="('\\x00',)", custom=math.nan),
        {"priority": 3},
        ["\x00"],
        {},
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_rows_input_decodes_as_kombu_decodes_its_text(case: str) -> None:
    headers, properties, args, kwargs, embed = CASES[case]
    text = encode_input(headers, properties, args, kwargs, embed)
    message = from_input(_row(text), queue="q")
    expected = _slow(text)
    assert _same(message.headers, expected["headers"])
    assert _same(message.properties, expected["properties"])
    assert _same(message.args, list(expected["args"] or []))
    assert _same(message.kwargs, dict(expected["kwargs"] or {}))
    assert _same(message.embed, dict(expected["embed"] or {}))


def test_the_rows_input_is_left_as_it_was() -> None:
    text = encode_input(_headers(stamps={"when": WHEN}), {"p": [WHEN]}, [WHEN], {}, None)
    row = _row(text)
    before = json.dumps(row, sort_keys=True)
    message = from_input(row, queue="q")
    assert message.headers["stamps"]["when"] == WHEN  # restored in the message's copy only
    message.headers["added"] = 1
    message.headers["timelimit"].append(1)  # a nested list without tagged values: its own too
    message.properties["added"] = 1
    assert json.dumps(row, sort_keys=True) == before


@pytest.mark.parametrize(
    "body",
    [
        " [[], {}, {}]",  # leading whitespace
        "[[], {}, {}] ",  # trailing whitespace
        "\ufeff[[], {}, {}]",  # a byte order mark
        "[[], {}, {}",  # cut short
        '[[], {}, {"__type__": "no-such-type", "__value__": 1}]',  # kombu refuses the tag
    ],
)
def test_a_body_the_scanner_does_not_take_whole_gets_kombus_own_answer(body: str) -> None:
    row = {"headers": _headers(), "properties": {}, "body": body}
    try:
        args, kwargs, embed = kombu_json.loads(body)
    except Exception as exc:  # the same error is the expected outcome
        with pytest.raises(type(exc)):
            from_input(row, queue="q")
        return
    message = from_input(row, queue="q")
    assert (message.args, message.kwargs, message.embed) == (args, kwargs, embed)
