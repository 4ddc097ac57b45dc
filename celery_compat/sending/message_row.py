"""A Celery protocol-v2 message as an ``x_jobs`` row: the one shape sending and migrate share.

Why it exists: a task sent through the facade and a message drained from a Celery broker must
become the SAME row, so the worker runs both through one path. The row's ``input`` is
``{"headers": {...}, "properties": {...}, "body": "<text>"}``: the body ``[args, kwargs, embed]``
is kept as the exact text Celery's JSON serializer writes (kombu's JSON: datetime, UUID, Decimal,
bytes carried as tagged objects), inside a jsonb string, so values come back exactly as through
Celery on Redis: ``1e16`` stays a float, NaN and ±Infinity survive, big ints stay ints, object
keys keep their order, NUL characters and lone surrogates survive (escaped, never raw, in the
text). jsonb itself would rewrite numbers (``1e16`` → ``10000000000000000``), refuse NaN and
``\\u0000`` and reorder keys; the headers stay a jsonb object (task id, name, retries readable in
SQL, and by ``x_jobs_celery_task_idx``); when a header holds what jsonb cannot (the ``argsrepr``
of a NUL argument, a NaN header), headers and properties are kept as text too and the task id is
copied to a top-level ``id``. Anything that is not JSON (an object, a circular structure) raises
kombu's ``EncodeError`` before any SQL runs. Rows written before this format (``args``/``kwargs``/
``embed`` as jsonb) are read as well. The task name is the row's ``name``; ``eta`` is ``run_at``.

What it is not: a broker decoder (``migrate`` turns broker bytes into a ``CeleryMessage``) or a
sender (``sending.py`` builds one from Celery's own ``create_task_message``).
"""

from __future__ import annotations

import json
import json.encoder
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from kombu.exceptions import EncodeError
from kombu.utils import json as kombu_json

from ujobs_bridge.errors import ErrorCode, PayloadError
from ujobs_bridge.ext.jobs import RANGE_TEXT, new_job_id, storable_instant
from ujobs_bridge.ext.observe import current_traceparent

PRIORITY_MIN, PRIORITY_MAX = 0, 255

# The longest task id (UTF-8 bytes) a row may carry: the ledger's primary key must fit a btree
# index row. The task name and the group, root and parent ids (task ids too) share the limit.
MAX_TASK_ID_BYTES = 1024
ID_HEADERS = (
    ("id", "task id"),
    ("task", "task name"),
    ("group", "group id"),
    ("root_id", "root id"),
    ("parent_id", "parent id"),
)
# Levels of list/dict nesting a header or property value may have: the engine's limit for a
# job's input, so a worker can always read the row back (deeper ends in RecursionError there).
MAX_HEADER_DEPTH = 64


def nesting_depth(value: Any, stop: int) -> int:
    """Levels of list/tuple/dict nesting in ``value`` (a scalar is 0), counted without
    recursion; counting ends once ``stop`` is passed (the result is then ``stop + 1``)."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        if depth > stop:
            return stop + 1
        deepest = max(deepest, depth)
        pending.extend((child, depth) for child in children)
    return deepest


def depth_problem(headers: dict[str, Any], properties: dict[str, Any]) -> str | None:
    """Which header or property value nests past ``MAX_HEADER_DEPTH``, or None."""
    for kind, values in (("header", headers), ("property", properties)):
        for key, value in values.items():
            if isinstance(value, dict | list | tuple) and (
                nesting_depth(value, MAX_HEADER_DEPTH) > MAX_HEADER_DEPTH
            ):
                return (
                    f"{kind} {str(key)[:80]!r} nests deeper than {MAX_HEADER_DEPTH} levels of "
                    "lists and dicts"
                )
    return None


@dataclass(frozen=True, slots=True)
class LimitProblem:
    """Why a message breaks the limits above: ``what`` it is (``id``, ``depth``, ``instant``)
    and the sentence that says so."""

    what: str
    text: str


def limits_problem(headers: dict[str, Any], properties: dict[str, Any]) -> LimitProblem | None:
    """The first way these headers and properties break the limits above, or None."""
    for key, what in ID_HEADERS:
        value = headers.get(key)
        if isinstance(value, str):
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_TASK_ID_BYTES:
                text = f"the {what} is {size} bytes long; at most {MAX_TASK_ID_BYTES} are accepted"
                return LimitProblem("id", text)
    depth = depth_problem(headers, properties)
    if depth is not None:
        return LimitProblem("depth", depth)
    for key in ("eta", "expires"):
        value = headers.get(key)
        try:
            instant = parse_instant(value)
            if instant is not None:
                storable_instant(instant, key)
        except (TypeError, ValueError, OverflowError) as exc:
            return LimitProblem("instant", f"header {key}: {exc}")
    return None


_HINTS = {
    "id": (
        ErrorCode.JOB_OPTION_INVALID,
        f"use ids of at most {MAX_TASK_ID_BYTES} UTF-8 bytes (Celery's own are uuids); "
        "ujobs-bridge migrate quarantines longer ones as well",
    ),
    "depth": (
        ErrorCode.PAYLOAD_TOO_DEEP,
        f"keep header values within {MAX_HEADER_DEPTH} levels of lists and dicts",
    ),
    "instant": (
        ErrorCode.JOB_OPTION_INVALID,
        f"give eta/expires within years 1..9999 once in UTC ({RANGE_TEXT}); countdown/expires "
        "in seconds must land there too",
    ),
}


class SerializerRefused(PayloadError, EncodeError):
    """A send asked for a serializer other than JSON (``serializer='pickle'``, or the app's
    ``task_serializer``): refused before any SQL, never silently sent as JSON. It is kombu's
    ``EncodeError`` (what Celery raises for a message it cannot serialize) and the project's
    ``UJ_PAYLOAD_NOT_JSON``."""

    code = ErrorCode.PAYLOAD_NOT_JSON


JSON_SERIALIZERS = frozenset({"json", "application/json"})


def check_serializer(headers: dict[str, Any], serializer: Any) -> None:
    """Refuse a message whose serializer is not JSON: rows hold Celery's JSON text, and
    untrusted bytes are never unpickled, so a pickle message would run with JSON's types
    (tuples as lists, objects refused) while its sender believed otherwise."""
    if serializer is None or str(serializer).lower() in JSON_SERIALIZERS:
        return
    raise SerializerRefused(
        f"{_describe(headers)}: serializer={serializer!r} was asked, but celery_compat sends "
        "every message with Celery's JSON serializer (it never unpickles)",
        hint=(
            "drop serializer= from the call (or set task_serializer='json') and pass ids or "
            "plain data; a task that needs another serializer can stay on the Celery broker "
            "through ujobs_broker_tasks"
        ),
    )


def check_limits(headers: dict[str, Any], properties: dict[str, Any]) -> None:
    """The sender's check: a ``PayloadError`` (code and hint) for a message past the limits."""
    problem = limits_problem(headers, properties)
    if problem is not None:
        code, hint = _HINTS[problem.what]
        raise PayloadError(f"task {headers.get('task')!r}: {problem.text}", hint=hint, code=code)


# kombu's JSON (it registers datetime, UUID, Decimal, bytes); typed here because kombu is not.
_loads: Callable[[str], Any] = kombu_json.loads


def reused_encoder(*, allow_nan: bool = True, compact: bool = False) -> Callable[[Any], str]:
    """kombu's JSON encoder with the C encoder built once instead of on every call (what
    ``json.dumps`` does), without the cycle check: a circular value ends in ``RecursionError``.
    The default is byte for byte what Celery's ``json`` serializer writes (``kombu dumps``)."""
    encoder: Any = kombu_json.JSONEncoder(
        allow_nan=allow_nan, check_circular=False, separators=(",", ":") if compact else None
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has the C encoder
        return encoder.encode  # type: ignore[no-any-return]
    iterencode = make(
        None,
        encoder.default,
        json.encoder.encode_basestring_ascii,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    return lambda value: "".join(iterencode(value, 0))


_encode_body = reused_encoder()
_encode_headers = reused_encoder(allow_nan=False, compact=True)
_quote: Callable[[str], str] = json.encoder.encode_basestring_ascii
# An unescaped \u0000 or lone surrogate in ASCII JSON text: what jsonb refuses in a string.
_JSONB_REFUSES = re.compile(
    r"(?<!\\)(?:\\\\)*(?:\\u0000|\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])"
    r"|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2})",
    re.IGNORECASE,
)
NOT_STORABLE = (TypeError, ValueError, RecursionError)


def _jsonb_refuses(text: str) -> bool:
    # ASCII JSON text has a \u escape only for a non-ASCII or control character: usually none,
    # and the substring test is far cheaper than the regex.
    return "\\u" in text and _JSONB_REFUSES.search(text) is not None


def encode_input(
    headers: dict[str, Any],
    properties: dict[str, Any],
    args: Any,
    kwargs: Any,
    embed: Any,
    *,
    what: str | None = None,
) -> str:
    """The row's ``input`` text; kombu's ``EncodeError`` for what cannot be stored, before any
    SQL runs (so a caller's transaction is never aborted by it). ``what`` names the message in
    that error (default: its task name and id)."""
    try:
        body = _encode_body([args, kwargs, embed])
    except NOT_STORABLE as exc:
        what = what or _describe(headers)
        raise EncodeError(
            f"{what}: an argument cannot be serialized as JSON ({_reason(exc)}); celery_compat "
            "stores messages with Celery's JSON serializer: pass ids or plain data"
        ) from exc
    try:
        head, props = _encode_headers(headers), _encode_headers(properties)
        if not (_jsonb_refuses(head) or _jsonb_refuses(props)):
            return f'{{"headers":{head},"properties":{props},"body":{_quote(body)}}}'
    except ValueError:  # NaN or ±Infinity in a header: kept, as text
        pass
    except (TypeError, RecursionError) as exc:
        raise EncodeError(
            f"{what or _describe(headers)}: a header or property cannot be stored ({_reason(exc)})"
        ) from exc
    what = what or _describe(headers)
    try:  # what jsonb cannot hold (argsrepr of a NUL argument...): the headers as text too
        head, props = _encode_body(headers), _encode_body(properties)
    except NOT_STORABLE as exc:
        raise EncodeError(
            f"{what}: a header or property cannot be stored ({_reason(exc)})"
        ) from exc
    task_id = headers.get("id")
    if not isinstance(task_id, str) or _jsonb_refuses(_quote(task_id)):
        raise EncodeError(f"{what}: the task id must be text without NUL or lone surrogates")
    return (
        f'{{"id":{_quote(task_id)},"headers":{_quote(head)},"properties":{_quote(props)},'
        f'"body":{_quote(body)}}}'
    )


def _describe(headers: dict[str, Any]) -> str:
    return f"task {headers.get('task')!r} ({headers.get('id')})"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "circular or too deeply nested"
    return str(exc)


def parse_instant(value: Any) -> datetime | None:
    """An ``eta``/``expires`` header (ISO text or datetime) as an aware datetime; naive is UTC."""
    if value is None or value == "":
        return None
    instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


def _in_utc(instant: datetime | None) -> datetime | None:
    return None if instant is None else instant.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class CeleryMessage:
    """One protocol-v2 task message, decoded."""

    headers: dict[str, Any]
    args: list[Any]
    kwargs: dict[str, Any]
    embed: dict[str, Any]
    queue: str
    properties: dict[str, Any] = field(default_factory=dict)
    job_id: UUID = field(default_factory=new_job_id)

    @property
    def task(self) -> str:
        return str(self.headers["task"])

    @property
    def task_id(self) -> str:
        return str(self.headers["id"])

    @property
    def retries(self) -> int:
        return int(self.headers.get("retries") or 0)

    @property
    def nesting(self) -> int:
        return int(self.headers.get("replaced_task_nesting") or 0)

    @property
    def eta(self) -> datetime | None:
        """The ``eta`` header in UTC: its own offset may be one PostgreSQL cannot read (past
        ±15:59, or with seconds)."""
        return _in_utc(parse_instant(self.headers.get("eta")))

    @property
    def expires(self) -> datetime | None:
        return _in_utc(parse_instant(self.headers.get("expires")))

    @property
    def priority(self) -> int:
        value = self.properties.get("priority")
        if value is None:
            value = (self.properties.get("delivery_info") or {}).get("priority")
        if value is None:
            return 0
        return max(PRIORITY_MIN, min(PRIORITY_MAX, int(value)))

    def input_json(self) -> str:
        """The row's ``input`` (see the module docstring); ``EncodeError`` if it cannot be."""
        return encode_input(self.headers, self.properties, self.args, self.kwargs, self.embed)

    def params(
        self, max_attempts: int, now: datetime | None, *, input_json: str | None = None
    ) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "retries": self.retries,
            "nesting": self.nesting,
            "id": self.job_id,
            "name": self.task,
            "queue": self.queue,
            "input": self.input_json() if input_json is None else input_json,
            "max_attempts": max_attempts,
            "priority": self.priority,
            "run_at": self.eta,
            "now": now,
            "traceparent": (self.headers.get("traceparent") or current_traceparent()),
            "enqueued_by": "celery_compat",
        }


def is_celery_input(value: Any) -> bool:
    return isinstance(value, dict) and "headers" in value and ("body" in value or "embed" in value)


# kombu's decoder hook (kombu >= 5.3); without it every input takes the text round trip.
_object_hook: Callable[[dict[str, Any]], Any] | None = getattr(kombu_json, "object_hook", None)
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
# What kombu's hook turns into a value: an object of exactly these keys (``{"__type__":
# "datetime", "__value__": "..."}``); it hands every other object back as it is.
_TAGGED = frozenset({"__type__", "__value__"})


def _body_decoder() -> Callable[[str], Any]:
    """kombu's ``loads`` for a body's text with the decoder built once instead of on every call
    (what ``json.loads`` does when given an ``object_hook``), and its scanner called directly:
    the same scanner and hook, so the same values. Text the scanner does not take whole from its
    first character (leading or trailing whitespace, a byte order mark, an error) goes through
    kombu's own call, which answers it (or raises) as before."""
    if _object_hook is None:  # pragma: no cover - kombu >= 5.3 has the hook
        return _loads
    decoder: Any = json.JSONDecoder(object_hook=_object_hook)  # scan_once is not in its stubs
    scan: Callable[[str, int], tuple[Any, int]] = decoder.scan_once

    def loads(text: str) -> Any:
        if type(text) is str:
            try:
                value, end = scan(text, 0)
            except (StopIteration, ValueError):
                return _loads(text)
            if end == len(text):
                return value
        return _loads(text)

    return loads


_loads_body = _body_decoder()


class _NotPlainJson(Exception):
    """A value psycopg's jsonb decoding cannot have produced: take the slow, exact path."""


def _restore(value: Any) -> Any:
    """What ``kombu loads(json.dumps(value))`` returns, without the text round trip: a copy in
    which every object goes through kombu's ``object_hook`` bottom-up, as the decoder does.
    Only containers are walked into (a scalar is taken as it is), and the hook is called only
    for an object it changes: one whose keys are exactly ``__type__`` and ``__value__``."""
    kind = type(value)
    if kind is dict:
        if _object_hook is None:
            raise _NotPlainJson
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlainJson
            out[key] = item if type(item) in _JSON_SCALARS else _restore(item)
        if len(out) == 2 and out.keys() == _TAGGED:
            return _object_hook(out)
        return out
    if kind is list:
        return [item if type(item) in _JSON_SCALARS else _restore(item) for item in value]
    if kind in _JSON_SCALARS:
        return value
    raise _NotPlainJson


def _plain(value: Any) -> Any:
    if isinstance(value, str):  # headers/properties kept as text (see encode_input)
        return _loads(value)
    try:
        return _restore(value)
    except _NotPlainJson:
        return _loads(json.dumps(value))


def from_input(value: Any, *, queue: str, job_id: UUID | None = None) -> CeleryMessage:
    """Rebuild the message from a row's ``input`` (as psycopg decoded the jsonb); ``job_id``: the
    row's id (else a new one is drawn). Every list and dict of the message is its own (decoded
    or restored anew: the row's input is left as it was), so none is copied again."""
    body = value.get("body")
    if isinstance(body, str):  # the exact text (this format); headers/properties: jsonb objects
        args, kwargs, embed = _loads_body(body)
        headers = _plain(value.get("headers"))
        properties = _plain(value.get("properties"))
    else:  # a row written before the exact-text format
        restored = _plain(value)
        args, kwargs, embed = restored.get("args"), restored.get("kwargs"), restored.get("embed")
        headers, properties = restored.get("headers"), restored.get("properties")
    return CeleryMessage(
        headers=headers if type(headers) is dict else dict(headers or {}),
        args=args if type(args) is list else list(args or []),
        kwargs=kwargs if type(kwargs) is dict else dict(kwargs or {}),
        embed=embed if type(embed) is dict else dict(embed or {}),
        queue=queue,
        properties=properties if type(properties) is dict else dict(properties or {}),
        job_id=new_job_id() if job_id is None else job_id,
    )
