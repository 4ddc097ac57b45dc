"""Jobs for ``tests/test_observer_faults.py``: bodies that raise exceptions nothing can print
(``__str__`` raises, ``__repr__`` raises, or formatting their traceback raises), and quick jobs
that say which process and thread ran them.

The module sets up OpenTelemetry's SDK at import (a ``TracerProvider`` as an application sets
one), so every process that imports it (the worker, and each ``--pool processes`` child) runs its
attempts in recording spans, whose ``record_exception`` and status read the exception's text.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from ujobs_bridge import job

QUEUE = "observed"

trace.set_tracer_provider(TracerProvider())


class UnprintableError(ValueError):
    """``str()`` of it raises."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ refuses")


class UnreprableError(ValueError):
    """``repr()`` of it raises."""

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ refuses")


class UnformattableError(ValueError):
    """Formatting its traceback raises (reading its ``__notes__`` does)."""

    @property
    def __notes__(self) -> Any:  # the traceback module reads it
        raise RuntimeError("__notes__ refuses")


@job(queue=QUEUE, max_attempts=2, backoff=0)
def bad_str() -> None:
    raise UnprintableError("hidden")


@job(queue=QUEUE, max_attempts=1)
def bad_repr() -> None:
    raise UnreprableError("hidden")


@job(queue=QUEUE, max_attempts=1)
def bad_traceback() -> None:
    raise UnformattableError("hidden")


@job(queue=QUEUE)
def quick(i: int) -> dict[str, Any]:
    """Which process and thread ran the body."""
    return {"i": i, "pid": os.getpid(), "thread": threading.current_thread().name}
