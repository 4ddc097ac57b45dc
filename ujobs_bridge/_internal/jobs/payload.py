"""JSON in, JSON out: the only encoding a job's input and output may have.

Why it exists: rows outlive the code that wrote them, and a worker on another machine must read
them without importing anything named by the data. So payloads are JSON and nothing else; a value
JSON cannot carry (a datetime, a set, NaN, an object) is refused where it enters, with the job's
name in the message, rather than stored half-way or pickled.

A job's input is checked at the door, before any connection is touched (so a refused enqueue
inside the caller's transaction leaves that transaction usable), and each refusal says where
the value is and what to do: NaN or Infinity (JSON has neither), a NUL character or a lone
surrogate (PostgreSQL text and jsonb hold neither), a dict key that is not a string (``{1: 2}``
would come back as ``{"1": 2}``), nesting deeper than ``MAX_DEPTH`` levels, a value that
contains itself.

A job's result is bounded in bytes where it is encoded (``result_size``, ``result_too_large``):
over the worker's limit (``--max-result-bytes``, default ``DEFAULT_MAX_RESULT_BYTES``) it is
refused before any statement is built, so one oversize result can neither hold the worker's
connection (and the lease renewals queued behind it) nor keep hundreds of megabytes alive.

What it is not: a schema validator for job arguments.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ujobs_bridge.errors import ErrorCode, PayloadError

MAX_DEPTH = 64  # levels of list/dict nesting a job input may have
DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024  # a result's JSON, UTF-8 encoded
# A result is stored in a jsonb column, whose strings hold at most 255 MB; the outcome batch
# carries the result inside a document of its own, so the limit cannot be set above this.
MAX_RESULT_BYTES_CEILING = 200 * 1024 * 1024

_HINT = (
    "pass only str, int, float, bool, None, list and dict (with str keys); "
    "convert datetimes with .isoformat(), decimals and UUIDs with str()"
)


# One encoder for every payload: ``json.dumps`` with these options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def dumps(value: Any, *, what: str) -> str:
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}", hint=_HINT) from exc
    if "e+" in text and "\\u0000" not in text:  # a float of 1e16 or more, maybe
        return _exact_large_floats(value)
    return text


# A float of 1e16 or more is written by ``repr`` with an exponent and its shortest digits
# (``3.156509516251743e+16``); jsonb keeps those digits as the integer they spell
# (31565095162517430), which reads back as an int that is not the float (31565095162517432).
# Such floats are all whole numbers, so they are written as their exact digits and ``.0``:
# jsonb keeps that, and it reads back as the same float.
_LARGE_FLOAT = 1e16


def _exact_large_floats(value: Any) -> str:
    exact: list[str] = []

    def swap(item: Any) -> Any:
        if type(item) is float and abs(item) >= _LARGE_FLOAT:
            exact.append(f"{int(item)}.0")
            return f"\x00{len(exact) - 1}"  # a token no accepted string holds (NUL)
        if isinstance(item, dict):
            return {k: swap(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [swap(v) for v in item]
        return item

    text: str = _ENCODER.encode(swap(value))
    for index, digits in enumerate(exact):
        text = text.replace(f'"\\u0000{index}"', digits, 1)
    return text


def result_size(text: str, limit: int) -> int | None:
    """The size in bytes of the JSON ``text`` when it is over ``limit``, else ``None``; cheap for
    the common small result (a length check; the text is encoded only when it is not ASCII and
    could be over)."""
    chars = len(text)
    if chars > limit:
        return chars  # at least that many bytes
    if chars * 4 <= limit or text.isascii():
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit else None


def result_too_large(what: str, size: int, limit: int) -> PayloadError:
    """The error of a result over the limit (``UJ_OUTPUT_TOO_LARGE``): never stored, never
    retried (the same body would return it again)."""
    return PayloadError(
        f"{what} is {size:,} bytes of JSON, over the worker's limit of {limit:,} bytes "
        "(--max-result-bytes); it was not stored",
        hint="return a reference instead (store the data in a table or an object store and "
        "return its key), or raise the limit with `worker --max-result-bytes N` "
        f"(at most {MAX_RESULT_BYTES_CEILING:,})",
        code=ErrorCode.OUTPUT_TOO_LARGE,
    )


def encode_input(args: tuple[Any, ...], kwargs: dict[str, Any], *, job_name: str) -> str:
    """The row's ``input``; raises :class:`PayloadError` (with where and why) for anything
    JSON or PostgreSQL cannot hold as it is."""
    if not args and not kwargs:
        return EMPTY_INPUT
    what = f"the input of job {job_name!r}"
    value = {"args": list(args), "kwargs": kwargs}
    if not _flat(args, kwargs):
        try:
            _walk(value, -1, set())  # so that an argument's own lists count from 1
        except _Found as found:
            raise found.error(what) from None
    text = dumps(value, what=what)
    if "\\u0000" in text:  # json escapes a NUL (or the text holds a backslash-u0000)
        _find_text_problem(args, kwargs, what)
    if not text.isascii():  # only non-ASCII text can hold a lone surrogate
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            _find_text_problem(args, kwargs, what)
    return text


# The input of a call without arguments (``dumps({"args": [], "kwargs": {}})``): the most common
# input of all, so it is not encoded again for every job (a batch of them is ``enqueue_many``'s
# hot path).
EMPTY_INPUT = '{"args":[],"kwargs":{}}'


def _flat(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """True when every argument is a str, int, bool, None or finite float and every key a str:
    then the walk has nothing to find (no container, so no depth, cycle or inner key), and the
    common call of a few scalars skips it. Anything else (a container, a NaN) goes the long way,
    which names where the problem is."""
    for item in args:
        kind = type(item)
        if kind not in _SCALARS and (kind is not float or not _isfinite(item)):
            return False
    for key, item in kwargs.items():
        kind = type(item)
        if type(key) is not str or (
            kind not in _SCALARS and (kind is not float or not _isfinite(item))
        ):
            return False
    return True


_SCALARS = frozenset({str, int, bool, type(None)})
_isfinite = math.isfinite


class _Found(Exception):
    """A problem met deep in the walk; the keys and indexes that lead to it are added on the way
    back up (no path text is built unless something is found)."""

    def __init__(self, kind: str, subject: Any = None) -> None:
        self.kind = kind
        self.subject = subject
        self.trail: list[Any] = []

    def error(self, what: str) -> PayloadError:
        steps = self.trail[::-1]  # outermost first: "args"/"kwargs", then keys and indexes
        where = steps[0] + "".join(f"[{step!r}]" for step in steps[1:]) if steps else "it"
        if self.kind == "float":
            value = self.subject
            name = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
            return _refuse(
                what,
                where,
                f"is {name}, which JSON cannot carry",
                "send None, or the value as a string (and parse it in the job)",
                ErrorCode.PAYLOAD_NOT_JSON,
            )
        if self.kind == "key":
            key = self.subject
            return _refuse(
                what,
                where,
                f"has the key {key!r} ({type(key).__name__}); JSON keys are strings"
                + _came_back(key),
                "convert the keys with str() before enqueueing, or pass a list of pairs",
                ErrorCode.PAYLOAD_KEY_INVALID,
            )
        if self.kind == "cycle":
            return _refuse(
                what,
                where,
                "contains itself (a circular reference)",
                "pass a copy without the cycle, or the ids of the objects",
                ErrorCode.PAYLOAD_NOT_JSON,
            )
        return _refuse(
            what,
            where,
            f"nests deeper than {MAX_DEPTH} levels of lists and dicts",
            "flatten it, or store the structure elsewhere and pass its id",
            ErrorCode.PAYLOAD_TOO_DEEP,
        )


def _walk(value: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int, path: set[int]) -> None:
    """Check one container: its keys, its floats, its depth, that it is not its own ancestor;
    strings are checked later on the encoded text (in C) and walked only if that finds one."""
    if depth > MAX_DEPTH:
        raise _Found("deep")
    ident = id(value)
    if ident in path:
        raise _Found("cycle")
    path.add(ident)
    is_dict = isinstance(value, dict)
    items: Any = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if is_dict and type(key) is not str:
            raise _Found("key", key)
        kind = type(item)
        if kind in _SCALARS:
            continue
        try:
            if kind is float:
                if not _isfinite(item):
                    raise _Found("float", item)
            elif kind is dict or kind is list or kind is tuple or isinstance(item, dict | list):
                _walk(item, depth + 1, path)  # a subclass: JSON encodes it like its base
        except _Found as found:
            found.trail.append(key)
            raise
    path.discard(ident)


def _refuse(what: str, where: str, problem: str, hint: str, code: ErrorCode) -> PayloadError:
    if len(where) > 120:
        where = where[:60] + "…" + where[-40:]
    return PayloadError(f"{what}: {where} {problem}", hint=hint, code=code)


def _came_back(key: Any) -> str:
    """What JSON would silently turn ``key`` into, said as the end of the sentence."""
    try:
        text = next(iter(json.loads(json.dumps({key: None}))))
    except (TypeError, ValueError):
        return ""
    return f", so it would come back as {text!r}"


def _find_text_problem(args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> None:
    """The encoded input holds a NUL or a lone surrogate: find the string, say where."""
    pending: list[tuple[Any, str]] = [(a, f"args[{i}]") for i, a in enumerate(args)]
    pending += [(v, f"kwargs[{k!r}]") for k, v in kwargs.items()]
    pending += [(k, f"the key {k!r} of kwargs") for k in kwargs]
    while pending:
        value, where = pending.pop()
        if isinstance(value, str):
            _check_text(value, where, what)
        elif isinstance(value, dict):
            pending += [(v, f"{where}[{k!r}]") for k, v in value.items()]
            pending += [(k, f"a key of {where}") for k in value]
        elif isinstance(value, list | tuple):
            pending += [(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _check_text(value: str, where: str, what: str) -> None:
    if "\x00" in value:
        raise _refuse(
            what,
            where,
            "holds a NUL character (\\x00), which PostgreSQL cannot store",
            "remove it, or send binary data base64-encoded",
            ErrorCode.PAYLOAD_TEXT_INVALID,
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise _refuse(
            what,
            where,
            f"holds a lone surrogate ({bad!r}), which is not valid Unicode",
            "decode bytes with errors='replace' (or send them base64-encoded)",
            ErrorCode.PAYLOAD_TEXT_INVALID,
        ) from None


def decode_input(value: Any) -> tuple[list[Any], dict[str, Any]]:
    """Read ``{"args": [...], "kwargs": {...}}`` back; anything else is one positional arg."""
    if isinstance(value, dict) and set(value) <= {"args", "kwargs"}:
        args = value.get("args", [])
        kwargs = value.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    return [value], {}
