"""Refuse bad names and numbers at declaration, with a message that names the fix.

Why it exists: a NaN poll interval is a busy loop, a negative concurrency is a worker that never
runs anything, and a queue name with a quote or a space becomes a LISTEN channel nobody can
match. Every one of them is refused here, at the first place it enters, never clamped.

What it is not: payload validation (see ``payload.py``).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from ujobs_bridge.errors import ConfigError, ErrorCode

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,48}$")
JOB_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:\-<>]{1,200}$")


def queue_name(value: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise ConfigError(
            f"queue name {value!r} is not allowed",
            hint="use 1-48 characters from A-Z a-z 0-9 _ . : - (for example 'emails' or 'billing.high')",
            code=ErrorCode.QUEUE_NAME_INVALID,
        )
    return value


def queue_list(text: str) -> list[str]:
    """Parse ``-Q q1,q2``: every name validated, duplicates refused, empty refused."""
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise ConfigError(
            f"queue list {text!r} has an empty name",
            hint="pass comma-separated names without blanks, e.g. -Q default,emails",
            code=ErrorCode.QUEUE_NAME_INVALID,
        )
    for n in names:
        queue_name(n)
    if len(set(names)) != len(names):
        raise ConfigError(
            f"queue list {text!r} names a queue twice",
            hint="list each queue once",
            code=ErrorCode.QUEUE_NAME_INVALID,
        )
    return names


def job_name(value: str) -> str:
    if not isinstance(value, str) or not JOB_NAME_PATTERN.match(value):
        raise ConfigError(
            f"job name {value!r} is not allowed",
            hint="use 1-200 characters from A-Z a-z 0-9 _ . : - < > (module.function is the default)",
            code=ErrorCode.JOB_NAME_INVALID,
        )
    return value


def positive_int(what: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{what} must be a whole number, got {value!r}",
            hint=f"set {what} to an integer >= {minimum}",
        )
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{what} is {value}, which is out of range", hint=f"set {what} {bound}")
    return value


# The longest delay or expiry accepted: 100 years. Longer ones are mistakes (milliseconds given
# as seconds, a timestamp given as a delay) and past ~290,000 years PostgreSQL's timestamps end.
MAX_DELAY_S = 100 * 365.25 * 86400


def seconds(
    what: str, value: object, *, allow_zero: bool = False, maximum: float | None = None
) -> float:
    """A duration given as seconds or a timedelta; finite and positive (or zero if allowed), and
    at most ``maximum`` seconds when given."""
    if isinstance(value, timedelta):
        number = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int past the largest float: past any maximum too
            raise ConfigError(
                f"{what} is a number of {len(str(abs(value)))} digits, past any duration",
                hint=f"set {what} to a finite number of seconds",
                code=ErrorCode.JOB_OPTION_INVALID,
            ) from None
    else:
        raise ConfigError(
            f"{what} must be a number of seconds or a timedelta, got {value!r}",
            hint=f"pass {what} as e.g. 1.5 or timedelta(seconds=1.5)",
        )
    if not math.isfinite(number):
        raise ConfigError(
            f"{what} is {number}, which is not a finite duration",
            hint=f"set {what} to a finite number of seconds",
        )
    if number < 0 or (number == 0 and not allow_zero):
        least = ">= 0" if allow_zero else "> 0"
        raise ConfigError(
            f"{what} is {number}s, which is not allowed", hint=f"set {what} {least} seconds"
        )
    if maximum is not None and number > maximum:
        raise ConfigError(
            f"{what} is {number:g}s, more than the {maximum:g}s accepted",
            hint=f"set {what} to at most {maximum:g} seconds (~{maximum / 31_557_600:g} years); "
            "a run_at datetime says 'at that time' directly",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    return number


# The longest look back a command takes (``purge --older-than``, ``jobs stats
# --stranded-after``): its cutoff stays well within the years Python and PostgreSQL share.
MAX_LOOKBACK_S = 100 * 31_557_600.0


def lookback(what: str, number: float) -> float:
    """A look back of ``number`` seconds from now: finite, at most ``MAX_LOOKBACK_S``."""
    if not math.isfinite(number) or number > MAX_LOOKBACK_S:
        raise ConfigError(
            f"{what} is {number:g}s, past the longest look back (100 years)",
            hint=f"set {what} to at most 100 years ({MAX_LOOKBACK_S:g} seconds)",
        )
    return number


def text_problem(value: object, *, max_length: int) -> str | None:
    """Why ``value`` is not a non-empty string PostgreSQL can store (at most ``max_length``
    characters, no NUL, no lone surrogate), as the end of a sentence; None when it is one."""
    if not isinstance(value, str):
        return f"is {type(value).__name__} {repr(value)[:80]}, not a string"
    if not value or len(value) > max_length:
        return f"is {len(value)} characters long"
    if "\x00" in value:
        return "holds a NUL character, which PostgreSQL cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate, which is not valid Unicode"
    return None


# The longest filter text taken (a name glob, a task id, a reason): longer cannot match a stored
# one. The largest offset: PostgreSQL's bigint, what ``OFFSET`` takes. The dashboard's query
# strings and the CLI's flags are held to the same.
MAX_FILTER_CHARS = 1024
MAX_OFFSET = 2**63 - 1


def filter_text(what: str, value: str) -> str:
    """A filter's text (a ``--name`` glob, a ``--task-id``, a ``--reason``) when the database
    can compare it: no NUL, no lone surrogate, 1 to ``MAX_FILTER_CHARS`` characters."""
    problem = text_problem(value, max_length=MAX_FILTER_CHARS)
    if problem is not None:
        raise ConfigError(
            f"{what} {problem}: no stored value can match it",
            hint=f"pass {what} as plain text of 1 to {MAX_FILTER_CHARS} characters",
        )
    return value


def offset(what: str, value: int) -> int:
    """A paging offset: 0 up to what ``OFFSET`` takes."""
    if value < 0:
        raise ConfigError(f"{what} {value} is negative", hint="pass 0 or more")
    if value > MAX_OFFSET:
        raise ConfigError(
            f"{what} {value} is past the largest offset", hint=f"pass at most {MAX_OFFSET}"
        )
    return value


def text_option(what: str, value: object, *, max_length: int) -> str:
    """A text option stored as a column (tenant id, idempotency key, traceparent): a non-empty
    string PostgreSQL can store, at most ``max_length`` characters."""
    problem = text_problem(value, max_length=max_length)
    if problem is not None:
        raise ConfigError(
            f"{what} {problem}",
            hint=f"pass {what} as a non-empty string of at most {max_length} characters "
            "(convert numbers with str())",
            code=ErrorCode.JOB_OPTION_INVALID,
        )
    return value  # type: ignore[return-value]  # checked: a str
