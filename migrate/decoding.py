"""Broker bytes → Python values, without trusting them: size caps, bounded decompression, and
only the deserializers the operator accepted.

Why it exists: a Celery broker is untrusted input: any process that can write to it
can put bytes in front of the drainer. Everything a drainer
takes goes through here in one order: size cap → ``body_encoding`` (base64) → ``compression``
(zlib/bzip2, stopped at the cap, so a decompression bomb costs at most the cap in memory) →
deserializer by content type. JSON, msgpack and YAML are decoded by their safe loaders (YAML
with ``yaml.safe_load`` only: a ``!!python/...`` tag is refused, never constructed). Pickle is
decoded only with ``--accept-pickle``, through kombu's registry; without it a pickle body is
quarantined unread. Anything that fails raises :class:`Poison` with a reason code the
quarantine stores.

What it is not: the protocol reader (``protocol.py`` turns the decoded body and headers into a
``CeleryMessage``) or a kombu ``Message.decode()`` (never called: it would honour whatever
content type the sender claimed).
"""

from __future__ import annotations

import base64
import binascii
import bz2
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kombu import serialization

from migrate.defaults import DEFAULT_MAX_BYTES

# Reason codes stored with a quarantined message (and counted in the report).
MALFORMED = "malformed"  # not valid JSON/msgpack/YAML, bad base64, or not a Celery message shape
CONTENT_REFUSED = "content_refused"  # a serializer not accepted (--accept-content)
PICKLE_REFUSED = "pickle_refused"  # a pickle body without --accept-pickle
UNSAFE_YAML = "unsafe_yaml"  # YAML with a python/... tag (would construct objects)
TOO_LARGE = "too_large"  # the message (body, headers, properties) over --max-bytes
DECOMPRESSION_BOMB = "decompression_bomb"  # inflates past --max-bytes
BAD_COMPRESSION = "bad_compression"  # corrupt or unsupported compression
UNKNOWN_TASK = "unknown_task"  # task name not registered in -A
NOT_JSON_SAFE = "not_json_safe"  # decoded, but the values cannot be stored as JSON
CHORD_UNRECOVERABLE = "chord_unrecoverable"  # a chord header part whose chord state is elsewhere
DUPLICATE_CONFLICT = "duplicate_conflict"  # same (id, retries, nesting) as a job, other arguments
DB_REJECTED = "db_rejected"  # decoded, but the database refused its row (found by splitting)

REASONS = (
    MALFORMED,
    CONTENT_REFUSED,
    PICKLE_REFUSED,
    UNSAFE_YAML,
    TOO_LARGE,
    DECOMPRESSION_BOMB,
    BAD_COMPRESSION,
    UNKNOWN_TASK,
    NOT_JSON_SAFE,
    CHORD_UNRECOVERABLE,
    DUPLICATE_CONFLICT,
    DB_REJECTED,
)

JSON = "application/json"
MSGPACK = "application/x-msgpack"
YAML = "application/x-yaml"
PICKLE = "application/x-python-serialize"
CONTENT_TYPES = {"json": JSON, "msgpack": MSGPACK, "yaml": YAML, "pickle": PICKLE}
_ALIASES = {
    "application/msgpack": MSGPACK,
    "application/x-msgpack": MSGPACK,
    "application/yaml": YAML,
    "application/x-yaml": YAML,
    "application/json": JSON,
    "application/x-python-serialize": PICKLE,
}
COMPRESSIONS = {
    "application/x-gzip": "zlib",
    "zlib": "zlib",
    "application/x-bz2": "bzip2",
    "bzip2": "bzip2",
}


class Poison(Exception):
    """This message cannot become a row; it goes to quarantine with ``reason``."""

    def __init__(
        self, reason: str, detail: str, *, task: str | None = None, task_id: str | None = None
    ) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.task = task
        self.task_id = task_id


@dataclass(frozen=True, slots=True)
class Accept:
    """What the drainer may deserialize. Pickle is separate: it needs its own flag."""

    content_types: frozenset[str] = frozenset({JSON})
    pickle: bool = False
    max_bytes: int = DEFAULT_MAX_BYTES

    @classmethod
    def parse(
        cls,
        names: str | list[str] | tuple[str, ...],
        *,
        pickle: bool,
        max_bytes: int,
        strict: bool = True,
    ) -> Accept:
        """``json,msgpack,yaml`` (names or content types) → the accepted content types. Pickle
        is never taken from ``names`` (only from ``pickle``); an unknown name is an error when
        ``strict`` (an operator's flag), skipped otherwise (an app's ``accept_content``)."""
        items = names.split(",") if isinstance(names, str) else list(names)
        found: set[str] = {JSON}
        for item in filter(None, (i.strip().lower() for i in items)):
            ctype = CONTENT_TYPES.get(item) or _ALIASES.get(item)
            if ctype is None and not strict:
                continue
            if ctype is None:
                raise ValueError(f"unknown serializer {item!r}: use json, msgpack or yaml")
            if ctype != PICKLE:  # pickle only ever through --accept-pickle
                found.add(ctype)
        return cls(frozenset(found), pickle, max_bytes)

    def names(self) -> list[str]:
        names = [n for n, c in CONTENT_TYPES.items() if c in self.content_types]
        return [*names, "pickle"] if self.pickle else names


@dataclass(slots=True)
class Envelope:
    """One broker message before its body is read: bytes plus the transport's metadata."""

    body: bytes
    content_type: str
    content_encoding: str
    headers: dict[str, Any]
    properties: dict[str, Any] = field(default_factory=dict)
    # The whole message as received (body with its headers and properties), for --max-bytes;
    # None: the body alone is known.
    size: int | None = None


def redis_envelope(raw: bytes, max_bytes: int) -> Envelope:
    """A kombu-Redis list element (a JSON envelope) → :class:`Envelope` (body still encoded)."""
    if len(raw) > max_bytes * 4 // 3 + 65536:  # base64 inflates the body by 4/3
        raise Poison(TOO_LARGE, f"{len(raw)} bytes in the broker, limit {max_bytes}")
    try:
        data = loads_json(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Poison(MALFORMED, f"the kombu envelope is not JSON: {exc}") from None
    except RecursionError:
        raise Poison(MALFORMED, "the kombu envelope nests deeper than Python can read") from None
    if not isinstance(data, dict):
        raise Poison(MALFORMED, "the kombu envelope is not a JSON object")
    headers = data.get("headers") or {}
    properties = data.get("properties") or {}
    body = data.get("body")
    if not isinstance(headers, dict) or not isinstance(properties, dict):
        raise Poison(MALFORMED, "headers/properties of the kombu envelope are not objects")
    size = len(raw)  # as received: the envelope, with a base64 body counted decoded
    if isinstance(body, str):
        if properties.get("body_encoding") == "base64":
            try:
                data_bytes = base64.b64decode(body, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise Poison(
                    MALFORMED, f"body_encoding is base64 but the body is not: {exc}"
                ) from None
            size += len(data_bytes) - len(body)
        else:
            data_bytes = body.encode("utf-8")
    elif body is None:
        data_bytes = b""
    else:
        data_bytes = json.dumps(body).encode("utf-8")  # a body stored unencoded as JSON
    return Envelope(
        data_bytes,
        str(data.get("content-type") or "application/data"),
        str(data.get("content-encoding") or "utf-8"),
        headers,
        properties,
        size,
    )


def _inflate(data: bytes, method: str, limit: int) -> bytes:
    if method == "zlib":
        inflater: Any = zlib.decompressobj()
        errors: tuple[type[BaseException], ...] = (zlib.error,)
    else:
        inflater = bz2.BZ2Decompressor()
        errors = (OSError, ValueError)
    try:
        out = inflater.decompress(data, limit + 1)  # never more than limit + 1 bytes in memory
    except errors as exc:
        raise Poison(BAD_COMPRESSION, f"{method} body does not decompress: {exc}") from None
    if len(out) > limit:
        raise Poison(
            DECOMPRESSION_BOMB,
            f"{method} body inflates past {limit} bytes ({len(data)} compressed)",
        )
    if not inflater.eof:
        raise Poison(BAD_COMPRESSION, f"{method} body is truncated")
    return bytes(out)


def decompress(envelope: Envelope, limit: int) -> bytes:
    """The body with any ``compression`` header undone, never producing more than ``limit`` bytes."""
    kind = envelope.headers.get("compression")
    if not kind:
        return envelope.body
    method = COMPRESSIONS.get(str(kind))
    if method is None:
        raise Poison(BAD_COMPRESSION, f"compression {kind!r} is not supported (zlib, bzip2)")
    return _inflate(envelope.body, method, limit)


_DECODER = json.JSONDecoder()
_JSON_WS = " \t\n\r"


def loads_json(data: bytes) -> Any:
    """``json.loads(data)``, faster for the usual case (UTF-8 text starting with ``{`` or ``[``):
    the bytes are decoded as ``json.loads`` would decode them (UTF-8, ``surrogatepass``) and
    parsed by the decoder directly, skipping the per-call encoding sniffing and whitespace
    regexes; anything else (a BOM, UTF-16/32, leading whitespace) takes ``json.loads``."""
    if data[:1] not in (b"{", b"[") or data[1:2] == b"\x00":  # json.loads: UTF-16-LE
        return json.loads(data)
    text = data.decode("utf-8", "surrogatepass")
    value, end = _DECODER.raw_decode(text)
    if end != len(text):
        rest = text[end:]
        extra = rest.lstrip(_JSON_WS)
        if extra:
            raise json.JSONDecodeError("Extra data", text, end + len(rest) - len(extra))
    return value


def _json(data: bytes) -> Any:
    # Plain json: kombu's typed values ({"__type__": "datetime", ...}) stay as those objects,
    # are written back unchanged into the row, and kombu's decoder restores them at run time.
    return loads_json(data)


def _msgpack(data: bytes) -> Any:
    import msgpack  # optional: kombu's msgpack extra, for the messages serialized with it

    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _yaml(data: bytes) -> Any:
    import yaml  # optional: kombu's yaml extra, for the messages serialized with it

    safe_load: Callable[[bytes], Any] = yaml.safe_load
    try:
        return safe_load(data)
    except yaml.constructor.ConstructorError as exc:
        raise Poison(
            UNSAFE_YAML, f"YAML asks to construct an object: {str(exc).splitlines()[0]}"
        ) from None


def _pickle(data: bytes) -> Any:
    loads: Callable[..., Any] = serialization.loads
    return loads(data, PICKLE, "binary", accept={PICKLE})


_DECODERS: dict[str, Callable[[bytes], Any]] = {JSON: _json, MSGPACK: _msgpack, YAML: _yaml}


def deserialize(envelope: Envelope, accept: Accept) -> Any:
    """The body as Python values, by content type, within ``accept``."""
    size = max(len(envelope.body), envelope.size or 0)  # headers and properties count too
    if size > accept.max_bytes:
        task, task_id = envelope.headers.get("task"), envelope.headers.get("id")
        raise Poison(
            TOO_LARGE,
            f"{size} bytes with its headers and properties, limit {accept.max_bytes}",
            task=task if isinstance(task, str) else None,
            task_id=task_id if isinstance(task_id, str) else None,
        )
    ctype = _ALIASES.get(envelope.content_type.lower(), envelope.content_type.lower())
    if ctype == PICKLE and not accept.pickle:
        raise Poison(PICKLE_REFUSED, "a pickle body; never unpickled without --accept-pickle")
    if ctype != PICKLE and ctype not in accept.content_types:
        raise Poison(
            CONTENT_REFUSED,
            f"content type {envelope.content_type!r} is not accepted ({', '.join(accept.names())})",
        )
    data = decompress(envelope, accept.max_bytes)
    decode = _pickle if ctype == PICKLE else _DECODERS[ctype]
    try:
        return decode(data)
    except Poison:
        raise
    except Exception as exc:  # any parser error: the bytes are not what they claim
        raise Poison(
            MALFORMED, f"{ctype} body does not parse: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
