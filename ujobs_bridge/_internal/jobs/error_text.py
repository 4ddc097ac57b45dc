"""The text stored as an attempt's or a step's error: the traceback, cut to its last 4000 chars.

Why it exists: the attempt core (``worker/attempt.py``) writes it to ``x_jobs.last_error`` and the
durable steps (``steps.py``) to ``x_job_steps.error``; both need the same text, and neither may
import the other (steps sit below the worker). Formatting runs a body's own code (an exception's
``__str__``, ``__repr__``, ``__notes__``), so it never raises: what cannot be formatted is named
``<unprintable ValueError>``, as the standard library names it (``describe`` does the same for
the one-line ``Type: message`` tracing and logs use).

What it is not: error codes or hints (``errors.py``).
"""

from __future__ import annotations

import traceback

ERROR_TEXT_LIMIT = 4000


class FormattedError(Exception):
    """An error whose text was formatted elsewhere (a body that failed in a child process):
    its text is stored as it is, not formatted again."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def unprintable(exc: BaseException) -> str:
    """What stands for an exception whose text cannot be had."""
    return f"<unprintable {type(exc).__name__}>"


def describe(exc: BaseException) -> str:
    """``Type: message`` (``Type`` alone for an empty message); never raises."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except BaseException:  # the exception's own __str__: whatever it raises
        message = unprintable(exc)
    return f"{name}: {message}" if message else name


def error_text(exc: BaseException) -> str:
    """The traceback of ``exc`` (with its causes), cut to the limit; never raises."""
    if isinstance(exc, FormattedError):
        return exc.text[-ERROR_TEXT_LIMIT:]
    try:
        text = "".join(traceback.format_exception(exc)).strip()
    except BaseException as failure:  # the exception's own code ran while formatting it
        text = _fallback(exc, failure)
    if len(text) > ERROR_TEXT_LIMIT:
        text = "…" + text[-ERROR_TEXT_LIMIT:]
    return text


def _fallback(exc: BaseException, failure: BaseException) -> str:
    """The frames alone (when even they cannot be had, none), then the exception's
    ``module.Type: message`` and why the rest is missing."""
    try:
        frames = "".join(traceback.format_tb(exc.__traceback__))
    except BaseException:
        frames = ""
    head = "Traceback (most recent call last):\n" if frames else ""
    return (
        f"{head}{frames}{type(exc).__module__}.{describe(exc)}"
        f" (its traceback could not be formatted: {describe(failure)})"
    )
