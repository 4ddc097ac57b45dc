"""JSON in, JSON out: the only encoding a job's input and output may have.

Why it exists: rows outlive the code that wrote them, and a worker on another machine must read
them without importing anything named by the data. So payloads are JSON and nothing else; a value
JSON cannot carry (a datetime, a set, NaN, an object) is refused where it enters, with the job's
name in the message, rather than stored half-way or pickled.

What it is not: a schema validator for job arguments.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import PayloadError

_HINT = (
    "pass only str, int, float, bool, None, list and dict (with str keys); "
    "convert datetimes with .isoformat(), decimals and UUIDs with str()"
)


# One encoder for every payload: ``json.dumps`` with these options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def dumps(value: Any, *, what: str) -> str:
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}", hint=_HINT) from exc


def encode_input(args: tuple[Any, ...], kwargs: dict[str, Any], *, job_name: str) -> str:
    try:  # the message is built only when it is needed: this runs once per job enqueued
        return _ENCODER.encode({"args": list(args), "kwargs": kwargs})
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"the input of job {job_name!r} is not JSON-serialisable: {exc}", hint=_HINT
        ) from exc


def decode_input(value: Any) -> tuple[list[Any], dict[str, Any]]:
    """Read ``{"args": [...], "kwargs": {...}}`` back; anything else is one positional arg."""
    if isinstance(value, dict) and set(value) <= {"args", "kwargs"}:
        args = value.get("args", [])
        kwargs = value.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    return [value], {}
