"""A decoded Celery body + headers → the ``CeleryMessage`` celery_compat's sender would have made.

Why it exists: a drained message and a facade-enqueued task must be the same row, so the worker
runs both through one path (``celery_compat.worker.execution``). This module reads protocol v2
(``task`` in the headers, body ``[args, kwargs, embed]``) and converts protocol v1 (everything
in a dict body) to the v2 shape, as Celery's own ``hybrid_to_proto2`` does. It validates what
the row needs (a task id, a task name the ``-A`` app registers, well-formed times, values JSON
can hold) and maps the broker's priority to the bridge's scale: higher runs first, as on
RabbitMQ, so a Redis priority ``p`` (0 = most urgent there) becomes ``9 - p``.

Expired messages: the row is inserted due now (its ``eta`` dropped) and the bridge worker
cancels it at claim time, storing REVOKED (reason ``expired``) and firing ``task_revoked``
exactly as a Celery worker does on receipt; the body never runs.

What it is not: byte-level decoding (``decoding.py``) or the database write (``batch.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from kombu.exceptions import EncodeError

from celery_compat.sending.message_row import (
    MAX_TASK_ID_BYTES,
    CeleryMessage,
    depth_problem,
    encode_input,
    parse_instant,
)
from migrate.appinfo import AppInfo
from migrate.decoding import MALFORMED, NOT_JSON_SAFE, UNKNOWN_TASK, Envelope, Poison
from ujobs_bridge.ext.jobs import new_job_id, storable_instant

REDIS_MAX_PRIORITY = 9
# Transport plumbing, not task headers: dropped from the row.
_DROP_HEADERS = (
    "compression",
    "x-death",
    "x-first-death-exchange",
    "x-first-death-queue",
    "x-first-death-reason",
    "x-last-death-exchange",
    "x-last-death-queue",
    "x-last-death-reason",
    "x-delivery-count",
)
_DROP_HEADER_SET = frozenset(_DROP_HEADERS)
_DROP_PROPERTIES = ("body_encoding", "application_headers", "content_type", "content_encoding")
_DROP_PROPERTY_SET = frozenset(_DROP_PROPERTIES)


# Header values stored as text columns (or looked up by them): PostgreSQL text holds no NUL and
# only valid UTF-8, and the ledger's primary key (task id) must fit a btree index row. The
# length limit is the sender's (celery_compat refuses what this quarantines).
MAX_TEXT_BYTES = MAX_TASK_ID_BYTES
_TEXT_HEADERS = (
    ("task", "task name"),
    ("id", "task id"),
    ("group", "group id"),
    ("root_id", "root id"),
    ("parent_id", "parent id"),
    ("traceparent", "traceparent"),
)
INT4_MIN, INT4_MAX = -(2**31), 2**31 - 1
# In JSON text written with ensure_ascii (as the row's input is): an escape preceded by an even
# number of backslashes is a real one. \u0000 is a NUL; a high surrogate not followed by a low
# one, or a low one not preceded by a high one, is a lone surrogate. jsonb refuses all three.
_REAL = r"(?:^|[^\\])(?:\\\\)*"
_NUL_ESCAPE = re.compile(_REAL + r"\\u0000")
_LONE_HIGH = re.compile(_REAL + r"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})", re.IGNORECASE)
_LONE_LOW = re.compile(_REAL + r"(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}", re.IGNORECASE)


def unstorable_escape(text: str) -> str | None:
    """Why PostgreSQL's jsonb would refuse this ASCII JSON text, or None."""
    if _NUL_ESCAPE.search(text):
        return "a string holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot store"
    if _LONE_HIGH.search(text) or _LONE_LOW.search(text):
        return "a string holds a lone UTF-16 surrogate, which is not valid Unicode"
    return None


def _storable_text(value: str, what: str, task: str | None, task_id: str | None) -> None:
    problem = None
    if "\x00" in value:
        problem = f"the {what} holds a NUL character, which PostgreSQL text cannot store"
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            problem = f"the {what} holds a lone surrogate, which is not valid Unicode"
        else:
            if size > MAX_TEXT_BYTES:
                problem = f"the {what} is {size} bytes long; at most {MAX_TEXT_BYTES} are accepted"
    if problem is not None:
        raise Poison(MALFORMED, problem, task=task, task_id=task_id)


def _whole(value: Any, what: str, task: str | None, task_id: str | None) -> None:
    """``retries``/``replaced_task_nesting``: a whole number that fits the ledger's int column."""
    number = int(value or 0)  # TypeError/ValueError/OverflowError (1e400): the caller's Poison
    if not INT4_MIN <= number <= INT4_MAX:
        raise Poison(
            MALFORMED,
            f"header {what} is {str(value)[:40]}, out of range ({INT4_MIN}..{INT4_MAX})",
            task=task,
            task_id=task_id,
        )


@dataclass(slots=True)  # not frozen: made once per message, never changed
class Decoded:
    """A message ready to insert, with what the report and the batch need to know about it."""

    message: CeleryMessage
    input: str  # the row's ``input`` (``celery_compat.sending.message_row.encode_input``), encoded
    expired: bool
    chord_group: str | None  # set for a chord header part: its chord state must be here
    redelivered: bool
    eta: datetime | None = None  # the row's ``run_at`` as read once here (None: due now)


def _v1_to_v2(body: dict[str, Any], headers: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """Protocol v1 (``task``/``id``/``args``/``kwargs`` in a dict body) → v2 headers + body."""
    task_id = body.get("id")
    new_headers: dict[str, Any] = {
        "lang": body.get("lang") or "py",
        "task": body.get("task"),
        "id": task_id,
        "shadow": body.get("shadow"),
        "eta": body.get("eta"),
        "expires": body.get("expires"),
        "group": body.get("group") or body.get("taskset"),
        "group_index": body.get("group_index"),
        "retries": body.get("retries") or 0,
        "timelimit": list(body.get("timelimit") or (None, None)),
        "root_id": body.get("root_id") or task_id,
        "parent_id": body.get("parent_id"),
        "argsrepr": body.get("argsrepr"),
        "kwargsrepr": body.get("kwargsrepr"),
        "origin": body.get("origin"),
        "ignore_result": body.get("ignore_result", False),
        "replaced_task_nesting": body.get("replaced_task_nesting") or 0,
    }
    if body.get("utc") is False:  # v1 without utc: times are the producer's local time
        for key in ("eta", "expires"):
            new_headers[key] = _local_to_aware(new_headers[key])
    new_headers.update({k: v for k, v in headers.items() if k not in new_headers})
    embed = {
        "callbacks": body.get("callbacks"),
        "errbacks": body.get("errbacks"),
        "chord": body.get("chord"),
        "chain": None,  # v1 has no chain field: chains nest as callbacks
    }
    return new_headers, [body.get("args") or [], body.get("kwargs") or {}, embed]


def _local_to_aware(value: Any) -> Any:
    if value is None or value == "":
        return value
    instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return (instant if instant.tzinfo is not None else instant.astimezone()).isoformat()


def _shape(
    envelope: Envelope, payload: Any
) -> tuple[dict[str, Any], list[Any], dict[str, Any], dict[str, Any]]:
    headers = dict(envelope.headers)
    if "task" not in headers:
        if not isinstance(payload, dict) or "task" not in payload or "id" not in payload:
            raise Poison(
                MALFORMED, "neither protocol v2 (no task header) nor v1 (no task/id in the body)"
            )
        headers, payload = _v1_to_v2(payload, headers)
    if not isinstance(payload, list | tuple) or len(payload) != 3:
        raise Poison(
            MALFORMED,
            "a protocol v2 body must be [args, kwargs, embed]",
            task=_text(headers.get("task")),
            task_id=_text(headers.get("id")),
        )
    args, kwargs, embed = payload
    if (
        not isinstance(args, list | tuple)
        or not isinstance(kwargs, dict)
        or not isinstance(embed, dict | None)
    ):
        raise Poison(
            MALFORMED,
            "args must be a list, kwargs and embed objects",
            task=_text(headers.get("task")),
            task_id=_text(headers.get("id")),
        )
    return headers, list(args), dict(kwargs), dict(embed or {})


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _properties(envelope: Envelope, queue: str, broker: str) -> dict[str, Any]:
    props = dict(envelope.properties)
    if not _DROP_PROPERTY_SET.isdisjoint(props):
        for key in _DROP_PROPERTIES:
            props.pop(key, None)
    info = dict(props.get("delivery_info") or {})
    info.setdefault("routing_key", queue)
    info.setdefault("exchange", "")
    props["delivery_info"] = info
    if broker == "redis":
        raw = props.get("priority")
        try:
            source = max(0, min(REDIS_MAX_PRIORITY, int(raw))) if raw is not None else 0
        except (TypeError, ValueError, OverflowError):
            source = 0
        props["ujobs_source_priority"] = raw
        props["priority"] = REDIS_MAX_PRIORITY - source
    return props


def to_message(
    envelope: Envelope,
    payload: Any,
    *,
    queue: str,
    broker: str,
    app: AppInfo,
    now: datetime,
    job_id: UUID | None = None,
) -> Decoded:
    """The row for one decoded message, or :class:`Poison` saying why there can be none.

    A value the row cannot hold (not JSON, a cycle a YAML or pickle body can carry, a header
    jsonb refuses) is ``not_json_safe``; NaN, ±Infinity, NUL and lone surrogates in arguments
    are kept, as Celery's JSON serializer carries them. ``job_id``: the row's id (drawn here
    when not given)."""
    headers, args, kwargs, embed = _shape(envelope, payload)
    task, task_id = _text(headers.get("task")), _text(headers.get("id"))
    if task is None or task_id is None:
        raise Poison(
            MALFORMED, "the task name and id must be non-empty strings", task=task, task_id=task_id
        )
    for key, what in _TEXT_HEADERS:
        value = headers.get(key)
        if isinstance(value, str):
            _storable_text(value, what, task, task_id)
    try:
        for key in ("retries", "replaced_task_nesting"):
            _whole(headers.get(key), key, task, task_id)
        eta = parse_instant(headers.get("eta"))
        expires = parse_instant(headers.get("expires"))
        if eta is not None:  # the engine's claim must be able to read the row's run_at back
            storable_instant(eta, "eta")
        if expires is not None:
            storable_instant(expires, "expires")
    except (TypeError, ValueError, OverflowError) as exc:
        raise Poison(
            MALFORMED, f"bad retries/eta/expires header: {exc}", task=task, task_id=task_id
        ) from None
    too_deep = depth_problem(headers, envelope.properties)
    if too_deep is not None:  # a worker could not read such a row back
        raise Poison(MALFORMED, too_deep, task=task, task_id=task_id)
    if task not in app.tasks:
        raise Poison(
            UNKNOWN_TASK,
            f"task {task!r} is not registered in the -A app",
            task=task,
            task_id=task_id,
        )
    properties = envelope.properties
    redelivered = bool(
        headers.get("redelivered")
        or properties.get("redelivered")
        or (properties.get("delivery_info") or {}).get("redelivered")
    )
    if not _DROP_HEADER_SET.isdisjoint(headers):
        for key in _DROP_HEADERS:
            headers.pop(key, None)
    expired = expires is not None and expires <= now
    if expired:
        headers["eta"] = eta = None  # due now: the worker cancels it at claim (REVOKED, expired)
    props = _properties(envelope, queue, broker)
    try:  # the row's input exactly as celery_compat's sender writes it
        input_text = encode_input(headers, props, args, kwargs, embed, what=f"task {task!r}")
    except EncodeError as exc:
        raise Poison(
            NOT_JSON_SAFE, f"a value cannot be stored as JSON: {exc}", task=task, task_id=task_id
        ) from None
    if "\\u0000" in input_text or "\\ud" in input_text:  # rare: then the exact check
        problem = unstorable_escape(input_text)
        if problem is not None:
            raise Poison(NOT_JSON_SAFE, problem, task=task, task_id=task_id)
    message = CeleryMessage(
        headers=headers,
        args=args,
        kwargs=kwargs,
        embed=embed,
        queue=queue,
        properties=props,
        job_id=new_job_id() if job_id is None else job_id,
    )
    chord_group = _text(headers.get("group")) if embed.get("chord") else None
    return Decoded(message, input_text, expired, chord_group, redelivered, eta)
