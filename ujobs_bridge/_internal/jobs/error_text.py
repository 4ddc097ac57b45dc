"""The text stored as an attempt's or a step's error: the traceback, cut to its last 4000 chars.

Why it exists: the attempt core (``worker/attempt.py``) writes it to ``x_jobs.last_error`` and the
durable steps (``steps.py``) to ``x_job_steps.error``; both need the same text, and neither may
import the other (steps sit below the worker).

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


def error_text(exc: BaseException) -> str:
    if isinstance(exc, FormattedError):
        return exc.text[-ERROR_TEXT_LIMIT:]
    text = "".join(traceback.format_exception(exc)).strip()
    if len(text) > ERROR_TEXT_LIMIT:
        text = "…" + text[-ERROR_TEXT_LIMIT:]
    return text
