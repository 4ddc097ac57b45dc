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


def dumps(value: Any, *, what: str) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}", hint=_HINT) from exc


def encode_input(args: tuple[Any, ...], kwargs: dict[str, Any], *, job_name: str) -> str:
    return dumps({"args": list(args), "kwargs": kwargs}, what=f"the input of job {job_name!r}")


def decode_input(value: Any) -> tuple[list[Any], dict[str, Any]]:
    """Read ``{"args": [...], "kwargs": {...}}`` back; anything else is one positional arg."""
    if isinstance(value, dict) and set(value) <= {"args", "kwargs"}:
        args = value.get("args", [])
        kwargs = value.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    return [value], {}
