"""A quarantined message as an operator is shown it: its secret-looking values hidden with the
engine's rules (``ujobs_bridge._internal.observe.redaction``, as the dashboard and ``jobs show`` hide job
arguments), inside a kombu envelope's base64 body too.

Why it exists: a poison message is kept byte for byte, and its bytes hold what the producer
sent: a ``password=`` kwarg, ``kwargsrepr``, a broker URL with its password in a header.
``migrate quarantine show`` and the dashboard's quarantine page print these bytes and must not
print those secrets; ``quarantine show --raw`` is the explicit way to get the bytes as stored.

What it is not: the stored entry (never changed: its sha256, retry and ``--raw`` use the real
bytes) or a decoder: JSON is parsed with ``json`` only, base64 with ``base64`` only; nothing
that could run code.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ujobs_bridge.ext.observe import redact, redact_text

MAX_DEPTH = 3  # an envelope whose body is an envelope ...: deep enough for kombu, bounded


def raw_bytes(raw: bytes, _depth: int = 0) -> bytes:
    """``raw`` with its secrets hidden; the same bytes when it holds none. JSON (a kombu
    envelope, a message body) is redacted by key and re-encoded; other bytes by pattern (a
    ``"password": ...`` pair, a URL's password), undecodable bytes kept as they are."""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8): text patterns only
        text = raw.decode("utf-8", "surrogateescape")
        hidden = redact_text(text)
        return raw if hidden == text else hidden.encode("utf-8", "surrogateescape")
    if not isinstance(parsed, dict | list):
        return raw
    shown = redact(parsed)
    if isinstance(shown, dict) and _depth < MAX_DEPTH:
        shown = _with_body_redacted(shown, _depth)
    return raw if shown == parsed else json.dumps(shown).encode()


def meta(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """The entry's broker metadata (headers, properties) with its secrets hidden."""
    return None if value is None else redact(value)


def _with_body_redacted(envelope: dict[str, Any], depth: int) -> dict[str, Any]:
    """A kombu envelope (``body`` base64 per ``properties.body_encoding``) with its body's
    secrets hidden, re-encoded the same way."""
    body = envelope.get("body")
    properties = envelope.get("properties")
    encoding = properties.get("body_encoding") if isinstance(properties, dict) else None
    if not isinstance(body, str) or encoding != "base64":
        return envelope
    try:
        decoded = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return envelope
    hidden = raw_bytes(decoded, depth + 1)
    if hidden == decoded:
        return envelope
    return {**envelope, "body": base64.b64encode(hidden).decode("ascii")}
