"""The one redaction of secrets, applied wherever text leaves the process: dashboard pages, the
CLI (``jobs show``/``ls``, ``migrate quarantine``), log lines, events sent to Flower, span
attributes, error messages and tracebacks, Celery's ``argsrepr``/``kwargsrepr``.

What it hides:

- the password (and secret query parameters) of every URL, well formed or not
  (``postgresql://u:PW@h``, ``postgresql//u:PW@h``, ``redis//:PW@h``, ``u:PW@h``);
- the value of every key that names a secret (password, passwd, pwd, secret, token, api_key,
  authorization, cookie, credential, session, ...): in dicts and lists, in JSON text, in
  argument reprs, and in free text as ``key=value``, ``key: value``, ``"key": "value"``;
- the secrets of libpq's ``key=value`` DSNs.

The names are configurable: ``UJOBS_SECRET_KEYS`` (comma-separated) adds names, read when a
process first redacts, or ``add_secret_keys``.

Why it exists: job arguments, results, error messages, Celery headers and quarantined broker
messages carry credentials; every surface must hide them the same way, so they all call this one
module. ``jobs show --show-secrets`` and ``migrate quarantine show --raw`` are the explicit ways
to see them as they are.

What it is not: a guarantee. It hides what LOOKS secret by key name or URL shape; a secret
under an innocent key in free text is shown.
"""

from __future__ import annotations

import ast
import json
import os
import re
from typing import Any
from urllib.parse import unquote

REDACTED = "***"
MASK = "****"  # a URL's or DSN's password (``redis://:****@host``)
ENV_SECRET_KEYS = "UJOBS_SECRET_KEYS"  # noqa: S105 (the variable's name, not a secret)

# Names that make a key's value a secret (a substring, any case). "key" is broad on purpose
# (api_key, private_key, access_key); a message's routing key and a job's idempotency key are not
# secrets.
SECRET_NAMES = (
    "pass",  # password, passwd, passphrase
    "pwd",
    "secret",
    "token",
    "credential",
    "authorization",
    "cookie",
    "session",
    "signature",
    "private",
    "(?<!routing_)(?<!idempotency_)(?<!routing-)key",
)
_extra_names: list[str] = []
_pattern: tuple[str, re.Pattern[str]] | None = None  # (UJOBS_SECRET_KEYS it was built with, it)


def add_secret_keys(*names: str) -> None:
    """Treat keys containing any of ``names`` (any case) as secrets from now on."""
    global _pattern
    _extra_names.extend(re.escape(n.strip()) for n in names if n.strip())
    _pattern = None


def secret_key_pattern() -> re.Pattern[str]:
    """The pattern a key's name is matched against: the built-in names, ``add_secret_keys``'
    and ``$UJOBS_SECRET_KEYS``' (rebuilt when that variable changes)."""
    global _pattern
    env = os.environ.get(ENV_SECRET_KEYS, "")
    if _pattern is None or _pattern[0] != env:
        extra = [re.escape(n.strip()) for n in env.split(",") if n.strip()]
        names = [*SECRET_NAMES, *_extra_names, *extra]
        _pattern = (env, re.compile("|".join(names), re.IGNORECASE))
    return _pattern[1]


def is_secret_key(name: object) -> bool:
    return bool(secret_key_pattern().search(str(name)))


# ---------------------------------------------------------------- URLs and DSNs

# A malformed URL's scheme: letters then at least one slash, with or without the colon
# (``postgresql//``, ``redis:/``); ``user:`` alone is not one (the colon starts a password).
_MALFORMED_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(?::/{1,2}|/{1,2})")
_KV_START = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*=")
_KV_PARAM = re.compile(
    r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*(?:'|$)|\S*)"
)


def url_shaped(dsn: str) -> bool:
    """True for a URL, well formed or not (``scheme://``, or userinfo before an ``@``); False
    for libpq's ``key=value`` form."""
    if "://" in dsn:
        return True
    return "@" in dsn and not _KV_START.match(dsn)


def split_url(dsn: str) -> tuple[str, str | None, str, str]:
    """``scheme://userinfo@rest?query`` cut by hand (``urlsplit`` raises on some malformed URLs):
    the userinfo is everything up to the LAST ``@`` before the query, so a password holding
    ``/``, ``:`` or ``#`` is still found. A URL missing its ``://`` (``postgresql//u:pw@h``,
    ``redis:/:pw@h``, ``u:pw@h``) is cut the same way: its scheme is what precedes the first
    slashes (``postgresql//``), given back as it was written."""
    if "://" in dsn:
        scheme, _, rest = dsn.partition("://")
        scheme += "://"
    else:
        found = _MALFORMED_SCHEME.match(dsn)
        scheme = found.group(0) if found else ""
        rest = dsn[len(scheme) :]
    body, mark, query = rest.partition("?")
    at = body.rfind("@")
    if at < 0:
        return scheme, None, body, mark + query
    return scheme, body[:at], body[at + 1 :], mark + query


def secrets_of(dsn: str) -> list[str]:
    """Every secret a DSN or broker URL holds, as written and percent-decoded (longest first):
    what must never be printed, whatever the text around it."""
    found: list[str] = []
    if url_shaped(dsn):
        _, userinfo, _, query = split_url(dsn)
        _, colon, password = (userinfo or "").partition(":")
        if colon and password:
            found.append(password)
        for pair in query.lstrip("?").split("&"):
            key, eq, value = pair.partition("=")
            if eq and value and is_secret_key(unquote(key)):
                found.append(value)
    else:
        found.extend(
            m.group("value").strip("'")
            for m in _KV_PARAM.finditer(dsn)
            if is_secret_key(m.group("key"))
        )
    found += [unquote(v) for v in found]
    return sorted({v for v in found if v}, key=len, reverse=True)


def scrub(text: str, dsn: str) -> str:
    """``text`` (an error message, say) with every secret of ``dsn`` replaced by ``****``."""
    for secret in secrets_of(dsn):
        text = text.replace(secret, MASK)
    return text


def mask_dsn(dsn: str) -> str:
    """The DSN with every password-like value replaced by ``****``: the URL's password and any
    secret query parameter, or any secret ``key=value``. Never raises, even on a malformed DSN:
    a URL missing its ``://`` has its password masked too."""
    if url_shaped(dsn):
        scheme, userinfo, hostpart, query = split_url(dsn)
        user, colon, password = (userinfo or "").partition(":")
        if colon and password:
            userinfo = f"{user}:{MASK}"
        if query:
            pairs = []
            for pair in query[1:].split("&"):
                key, eq, value = pair.partition("=")
                secret = eq and value and is_secret_key(unquote(key))
                pairs.append(f"{key}={MASK}" if secret else pair)
            query = "?" + "&".join(pairs)
        authority = "" if userinfo is None else userinfo + "@"
        return f"{scheme}{authority}{hostpart}{query}"
    return _KV_PARAM.sub(
        lambda m: (
            m.group("key") + m.group("eq") + MASK if is_secret_key(m.group("key")) else m.group(0)
        ),
        dsn,
    )


# A URL inside text, with or without its "://": scheme, "://" (or "//", ":/"), up to whitespace,
# a quote or a closing bracket.
_URL = re.compile(
    r"""(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}(?:://|:?//|:/)[^\s'"<>\])}]+"""
)
# Userinfo with a password before a host, without any scheme: ``user:pw@host``.
_USERINFO = re.compile(
    r"""(?<![\w/:@.+-])(?P<user>[\w.+-]{0,64}):(?P<pw>[^\s'"<>@/:]{1,256})@(?=[\w.\[-])"""
)


def mask_urls(text: str) -> str:
    """``text`` with the password and secret parameters of every URL in it masked, whatever the
    URL's shape (``redis://:****@host``, ``postgresql//u:****@host``, ``u:****@host``)."""
    if "/" in text:
        text = _URL.sub(lambda m: mask_dsn(m.group(0)), text)
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m.group('user')}:{MASK}@", text)
    return text


# ---------------------------------------------------------------- structures and text


def redact(value: Any) -> Any:
    """``value`` with the value of every secret-looking key replaced by ``***``, the argument
    reprs (``argsrepr``/``kwargsrepr``) redacted the same way, and URL passwords and
    ``key=value`` secrets in strings hidden."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if is_secret_key(k):
                out[k] = REDACTED
            elif (k in REPR_KEYS or k in CONTEXT_REPR_KEYS) and isinstance(v, str):
                out[k] = redact_repr(v)
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str) and value[:1] in ("[", "{"):
        return _redact_json_text(value)
    if isinstance(value, str):
        return redact_message(value)
    return value


# Headers that repeat a job's arguments as text (Celery's protocol: ``repr()`` of args and
# kwargs); redacted like the arguments themselves.
REPR_KEYS = frozenset({"argsrepr", "kwargsrepr"})
# Where Celery puts those reprs as text beside other fields: its log record's context
# (``celery.app.trace``'s ``extra={"data": {"args": ..., "kwargs": ...}}``) and its task events.
# Only a string under these keys is read as a repr; a job's own args list or kwargs dict is
# data, redacted by key.
CONTEXT_REPR_KEYS = frozenset({"args", "kwargs"})
MAX_REPR = 64 * 1024
MAX_JSON_TEXT = 1024 * 1024
# In a repr that cannot be parsed (cut short, or custom): 'secret-key': value, up to , } or ).
_REPR_PAIR = re.compile(
    r"""(?P<key>(?P<q>['"])(?P<name>(?:(?!(?P=q)).)*)(?P=q)\s*:\s*)"""
    r"""(?P<value>'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^,})\]]*)"""
)
# In free text: key=value or key: value (an error message, a traceback, a query string) whose
# key names a secret; the value is quoted, or runs to whitespace or a separator; an
# Authorization's scheme goes with it. Built with the names (``secret_key_pattern``).
_TEXT_PAIR_FORMAT = (
    r"""(?P<key>(?<![\w.-])(?P<name>[\w.-]{{0,64}}(?:{names})[\w.-]{{0,64}})\s*(?:=|:(?!//))\s*)"""
    r"""(?P<value>(?:(?:Bearer|Basic|Token|Digest)\s+)?"""
    r"""(?:'(?:[^'\\\n]|\\.)*'?|"(?:[^"\\\n]|\\.)*"?|[^\s,;&'")}}\]]+))"""
)
_text_pair: re.Pattern[str] | None = None


def _text_pair_pattern() -> re.Pattern[str]:
    global _text_pair
    names = secret_key_pattern()
    if _text_pair is None or _text_pair.pattern.find(names.pattern) < 0:
        _text_pair = re.compile(_TEXT_PAIR_FORMAT.format(names=names.pattern), re.IGNORECASE)
    return _text_pair


def _redact_json_text(text: str) -> str:
    """A string holding JSON (a message body kept as exact text, as celery_compat stores one)
    redacted inside; one too large to inspect is hidden whole."""
    if len(text) > MAX_JSON_TEXT:
        return REDACTED
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return redact_message(text)
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
    return redact_message(_hide_repr_pairs(text, lambda _value: str(quote(REDACTED))))


def _quoted_like(value: str) -> str:
    return json.dumps(REDACTED) if value.startswith('"') else repr(REDACTED)


_NOT_A_KEY = re.compile(r"(?:Error|Exception|Warning|Exit)$")  # ``KeyError: 'x'`` is no secret


def redact_message(text: str) -> str:
    """Free text (an error message, a traceback, a log line) with its secrets hidden: URL
    passwords whatever the URL's shape, and the value of every ``key=value``, ``key: value``
    or ``"key": "value"`` whose key names a secret."""
    if not text:
        return text
    text = mask_urls(text)
    text = _hide_repr_pairs(text, _quoted_like)
    return _text_pair_pattern().sub(_hide_pair, text)


_OPENERS = {"{": "}", "[": "]", "(": ")"}


def _hide_repr_pairs(text: str, hidden: Any) -> str:
    """Every ``'key': value`` or ``"key": value`` pair whose key names a secret with its value
    replaced by ``hidden(value)``. A value that opens a dict, a list or a tuple is hidden to its
    matching close (all of it: ``'credentials': {'user': 'u', 'pw': 'x'}``), or to the end of
    the text when it never closes (a repr cut short)."""
    out: list[str] = []
    pos = 0
    for m in _REPR_PAIR.finditer(text):
        if m.start() < pos or not is_secret_key(m.group("name")):
            continue
        start = m.start("value")
        end = _value_end(text, start) if text[start : start + 1] in _OPENERS else m.end("value")
        out += [text[pos:start], hidden(text[start:end])]
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _value_end(text: str, start: int) -> int:
    """Where the bracketed value opening at ``start`` closes (after its closing bracket), its
    quoted strings skipped; the end of the text when it never closes."""
    closing: list[str] = []
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"":
            i += 1
            while i < n and text[i] != ch:
                i += 2 if text[i] == "\\" else 1
        elif ch in _OPENERS:
            closing.append(_OPENERS[ch])
        elif closing and ch == closing[-1]:
            closing.pop()
            if not closing:
                return i + 1
        i += 1
    return n


def _hide_pair(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value")
    if not is_secret_key(name) or _NOT_A_KEY.search(name):
        return m.group(0)
    if value in (REDACTED, repr(REDACTED), json.dumps(REDACTED), MASK):
        return m.group(0)
    return m.group("key") + REDACTED
