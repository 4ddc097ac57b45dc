"""Check ``apply_async``/``send_task`` options before Celery builds the message, and refuse a bad
one with an error that is both the project's (``UJ_JOB_OPTION_INVALID``, a hint) and the type
Celery itself raises for it.

Why it exists: Celery turns ``countdown``/``expires`` into instants with Python's arithmetic, so a
bad one surfaces as a bare ``OverflowError`` (``countdown=1e300``), ``ValueError`` (``nan``,
``expires="tomorrow"``) or ``TypeError`` (``countdown="5"``); others it does not check at all and
the row cannot hold them (a task name with NUL: a driver error; ``priority="high"``,
``retries="x"``: an ``int()`` failure inside the sender). Code written for Celery catches
Celery's types, so each refusal here is an instance of that type too (``SendOptionOverflowError``
is an ``OverflowError`` and a ``PayloadError``); where Celery raises nothing, the type is the
one Python gives for that mistake (``TypeError`` for the wrong kind, ``ValueError`` for a wrong
value of the right kind).

What it is not: the limits a drained message is held to (``message_row.limits_problem``, which
the sender checks as well), nor routing (``queue_names.py``).
"""

from __future__ import annotations

import math
import numbers
from datetime import datetime
from typing import Any

from dateutil.parser import isoparse
from kombu.exceptions import EncodeError

from celery_compat.sending.message_row import parse_instant
from ujobs_bridge.errors import ErrorCode, PayloadError
from ujobs_bridge.ext.jobs import RANGE_TEXT, instant_after, storable_instant

# Celery's own floor for countdown/expires seconds (``AMQP._verify_seconds``: ``ValueError``).
CELERY_INT_MIN = -2147483648
MAX_TASK_NAME_BYTES = 1024

_TIMES_HINT = (
    f"give eta/expires as an aware datetime (or ISO 8601 text) within years 1..9999 once in UTC "
    f"({RANGE_TEXT}); countdown/expires in seconds as a finite number that lands there too"
)


class SendOptionError(PayloadError):
    """An ``apply_async``/``send_task`` option the bridge refuses (``UJ_JOB_OPTION_INVALID``)."""

    code = ErrorCode.JOB_OPTION_INVALID


class SendOptionValueError(SendOptionError, ValueError):
    """A value of the right kind that cannot be sent (``countdown=nan``, ``expires="tomorrow"``,
    ``priority="high"``), where Celery raises (or Python would raise) ``ValueError``."""


class SendOptionTypeError(SendOptionError, TypeError):
    """A value of the wrong kind (``countdown="5"``, ``headers=5``), where Celery raises
    ``TypeError``."""


class SendOptionEncodeError(SendOptionError, EncodeError):
    """A task id the row cannot hold (NUL, a lone surrogate, too long): kombu's ``EncodeError``,
    which a send raises for a message that cannot be serialized."""


class SendOptionOverflowError(SendOptionError, OverflowError):
    """A number of seconds that lands outside the instants a row can hold (``countdown=1e300``),
    where Celery raises ``OverflowError``."""


def _seconds(what: str, value: Any, now: datetime) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SendOptionTypeError(
            f"apply_async: {what} must be a number of seconds, got {type(value).__name__} "
            f"{str(value)[:80]!r}",
            hint=_TIMES_HINT,
        )
    try:
        number = float(value)
    except OverflowError:  # an int past the largest float
        number = -math.inf if str(value).startswith("-") else math.inf
    if math.isnan(number):
        raise SendOptionValueError(f"apply_async: {what} is NaN, not a duration", hint=_TIMES_HINT)
    # Celery refuses fewer than CELERY_INT_MIN seconds with ValueError, later instants that
    # overflow a datetime with OverflowError: the same types, with the row's range as reason.
    kind = SendOptionValueError if number < CELERY_INT_MIN else SendOptionOverflowError
    try:
        instant_after(now, number, what)
    except ValueError as exc:
        raise kind(f"apply_async: {exc}", hint=_TIMES_HINT) from None
    if number < CELERY_INT_MIN:
        raise kind(
            f"apply_async: {what} {number:g} is out of range: Celery takes no fewer than "
            f"{CELERY_INT_MIN} seconds",
            hint=_TIMES_HINT,
        )


def _instant(what: str, value: Any) -> None:
    if not isinstance(value, datetime | str):
        raise SendOptionTypeError(
            f"apply_async: {what} must be a datetime or ISO 8601 text, got "
            f"{type(value).__name__} {str(value)[:80]!r}",
            hint=_TIMES_HINT,
        )
    try:
        if isinstance(value, str):
            isoparse(value)  # what Celery's send_task reads an expires text with
        instant = parse_instant(value)
    except (ValueError, OverflowError):
        raise SendOptionValueError(
            f"apply_async: {what} {str(value)[:80]!r} is not an ISO 8601 time", hint=_TIMES_HINT
        ) from None
    if instant is not None:
        try:
            storable_instant(instant, what)
        except ValueError as exc:
            raise SendOptionOverflowError(f"apply_async: {exc}", hint=_TIMES_HINT) from None


def check_times(options: dict[str, Any], now: datetime) -> None:
    """``eta``/``countdown``/``expires`` as Celery reads them: a countdown (when truthy) wins
    over the eta; ``expires`` is seconds or an instant."""
    countdown = options.get("countdown")
    if countdown:  # Celery's test: a countdown of 0 leaves the eta as given
        _seconds("countdown", countdown, now)
    elif options.get("eta") is not None:
        _instant("eta", options["eta"])
    expires = options.get("expires")
    if expires is not None:
        if isinstance(expires, numbers.Real) and not isinstance(expires, bool):
            _seconds("expires", expires, now)
        else:
            _instant("expires", expires)


def _whole(what: str, value: Any, *, hint: str) -> None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return
    if isinstance(value, str):
        try:
            int(value)
            return  # Celery's own int(): "3" is a priority
        except ValueError:
            raise SendOptionValueError(
                f"apply_async: {what} {value[:80]!r} is not a whole number", hint=hint
            ) from None
    if isinstance(value, float) and math.isfinite(value):
        return  # int() of it, as kombu takes it
    raise SendOptionTypeError(
        f"apply_async: {what} must be a whole number, got {type(value).__name__} "
        f"{str(value)[:80]!r}",
        hint=hint,
    )


def _limit(what: str, value: Any) -> None:
    """A time limit the worker can keep: None, or a finite number of seconds >= 0 (a worker
    handed ``"x"`` or NaN could not run the message at all)."""
    if value is None:
        return
    hint = f"pass {what} as a number of seconds (e.g. 30), or leave it out"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SendOptionTypeError(
            f"apply_async: {what} must be a number of seconds, got {type(value).__name__} "
            f"{str(value)[:80]!r}",
            hint=hint,
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise SendOptionValueError(
            f"apply_async: {what} is {str(value)[:80]}, not a finite number of seconds >= 0",
            hint=hint,
        )


def text_problem(value: Any, max_bytes: int) -> str | None:
    """Why ``value`` cannot be a task name or id in a row (not text, empty, NUL, lone
    surrogate, too long), or None."""
    if not isinstance(value, str):
        return f"is {type(value).__name__} {str(value)[:80]!r}, not text"
    if not value:
        return "is empty"
    if "\x00" in value:
        return "holds a NUL character, which PostgreSQL cannot store"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "holds a lone surrogate, which is not valid Unicode"
    if size > max_bytes:
        return f"is {size} bytes long; at most {max_bytes} are accepted"
    return None


# The ids a send carries into rows (the message's, and its group's results): each must be text
# a row can hold.
_ID_OPTIONS = (
    ("task_id", "task id"),
    ("group_id", "group id"),
    ("root_id", "root id"),
    ("parent_id", "parent id"),
)


def check_send(name: Any, options: dict[str, Any], now: datetime) -> None:
    """Every option of one bridge-bound send Celery would fail on, or the row could not hold."""
    problem = text_problem(name, MAX_TASK_NAME_BYTES)
    if problem is not None:
        kind = SendOptionTypeError if not isinstance(name, str) else SendOptionValueError
        raise kind(
            f"send_task: the task name {name[:80]!r} {problem}"
            if isinstance(name, str)
            else f"send_task: the task name {problem}",
            hint="name the task as registered on the app, e.g. 'proj.tasks.add'",
        )
    for key, what in _ID_OPTIONS:
        value = options.get(key)
        if isinstance(value, str) and (problem := text_problem(value, MAX_TASK_NAME_BYTES)):
            raise SendOptionEncodeError(
                f"apply_async: the {what} {value[:80]!r} {problem}",
                hint=f"leave {key} out (Celery makes a uuid) or pass text without NUL",
            )
    if "eta" in options or "countdown" in options or "expires" in options:
        check_times(options, now)
    _whole(
        "priority",
        options.get("priority"),
        hint="pass priority as a whole number from 0 (lowest) to 255, or leave it out",
    )
    _whole("retries", options.get("retries"), hint="leave retries out; Task.retry() counts them")
    for key in ("time_limit", "soft_time_limit"):
        _limit(key, options.get(key))
    headers = options.get("headers")
    if headers is not None and not isinstance(headers, dict):
        raise SendOptionTypeError(
            f"apply_async: headers must be a dict, got {type(headers).__name__}",
            hint="pass headers={'name': value}",
        )
