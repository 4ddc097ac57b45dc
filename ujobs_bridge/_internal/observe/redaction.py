"""Secret-looking values hidden before anything is shown: the values of keys that look like
secrets (password, token, api_key, ...), the same inside argument reprs and JSON text, and the
password (and secret query parameters) of any URL inside a string, as DSNs are masked.

Why it exists: job arguments, results, Celery headers and quarantined broker messages carry
credentials (a ``password=`` kwarg, a broker URL with its password in a header); the CLI
(``jobs show``, ``migrate quarantine show``) and the dashboard must hide them the same way, so
they all call this one module. ``jobs show --show-input`` and ``migrate quarantine show --raw``
are the explicit ways to see them as they are.

What it is not: a guarantee. It hides what LOOKS secret by key name or URL shape; a secret
under an innocent key in free text is shown.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from ujobs_bridge._internal.config.dsn import mask_dsn

# "key" is broad on purpose (api_key, private_key, key); a message's routing key is not a secret.
SECRET_KEY = re.compile(r"pass|secret|token|(?<!routing_)key|authorization|cookie", re.IGNORECASE)
REDACTED = "***"


# Headers that repeat a job's arguments as text (Celery's protocol: ``repr()`` of args and
# kwargs); redacted like the arguments themselves.
REPR_KEYS = frozenset({"argsrepr", "kwargsrepr"})
MAX_REPR = 64 * 1024
MAX_JSON_TEXT = 1024 * 1024
# In a repr that cannot be parsed (cut short, or custom): 'secret-key': value, up to , } or ).
_REPR_PAIR = re.compile(
    r"""(?P<key>(?P<q>['"])(?P<name>(?:(?!(?P=q)).)*)(?P=q)\s*:\s*)"""
    r"""(?P<value>'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^,})\]]*)"""
)


# A URL inside text: scheme://... up to whitespace, a quote or a closing bracket.
_URL = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*://[^\s'"<>\])}]+""")


def mask_urls(text: str) -> str:
    """``text`` with the password and secret parameters of every URL in it masked
    (``dsn.mask_dsn``: ``redis://:****@host``)."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: mask_dsn(m.group(0)), text)


def redact(value: Any) -> Any:
    """``value`` with the value of every secret-looking key replaced by ``***``, the argument
    reprs (``argsrepr``/``kwargsrepr``) redacted the same way, and URL passwords in strings
    masked."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if SECRET_KEY.search(str(k)):
                out[k] = REDACTED
            elif k in REPR_KEYS and isinstance(v, str):
                out[k] = redact_repr(v)
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str) and value[:1] in ("[", "{"):
        return _redact_json_text(value)
    if isinstance(value, str):
        return mask_urls(value)
    return value


def _redact_json_text(text: str) -> str:
    """A string holding JSON (a message body kept as exact text, as celery_compat stores one)
    redacted inside; one too large to inspect is hidden whole."""
    if len(text) > MAX_JSON_TEXT:
        return REDACTED
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(parsed, dict | list):
        return text
    hidden = redact(parsed)
    return text if hidden == parsed else json.dumps(hidden, ensure_ascii=False)


def redact_repr(text: str) -> str:
    """A ``repr()`` of arguments with its secret-looking keys' values hidden: parsed as a
    literal (never evaluated) and redacted when it parses, else by pattern; one too large to
    inspect is hidden whole."""
    if len(text) > MAX_REPR:
        return REDACTED
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return redact_text(text, quote=repr)
    hidden = redact(parsed)
    return text if hidden == parsed else repr(hidden)


def redact_text(text: str, *, quote: Any = json.dumps) -> str:
    """Text that could not be parsed (a body cut short, a malformed message): every
    ``'key': value`` or ``"key": value`` pair with a secret-looking key gets ``***`` (written by
    ``quote``), and every URL its password masked."""
    hidden = _REPR_PAIR.sub(
        lambda m: (
            m.group("key") + quote(REDACTED) if SECRET_KEY.search(m.group("name")) else m.group(0)
        ),
        text,
    )
    return mask_urls(hidden)
