"""Jobs that real worker processes run in ``test_outages.py`` while their database goes away.

Why it exists: an outage test cannot keep its effect ledger or its gates in the database it
stops, so these bodies leave their marks as files in ``UJOBS_TEST_MARKS`` (one file per body
event: ``<event>-<key>-<attempt>-<pid>``) and wait for a gate file ``gate-<key>`` there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ujobs_bridge import current_job, job, step


def marks() -> Path:
    return Path(os.environ["UJOBS_TEST_MARKS"])


def mark(event: str, key: str) -> None:
    ctx = current_job()
    (marks() / f"{event}-{key}-{ctx.attempt}-{os.getpid()}").touch()


def hold(key: str) -> None:
    """Wait for the gate file of ``key`` (cooperatively: a stopped attempt raises)."""
    while not (marks() / f"gate-{key}").exists():
        current_job().wait(0.05)


@job(queue="outage", max_attempts=1)
def finish(key: str) -> dict[str, Any]:
    """Start, wait at the gate, end: one attempt only, so a result lost is a job dead."""
    mark("start", key)
    hold(key)
    mark("end", key)
    return {"key": key, "pid": os.getpid()}


@job(queue="outage", max_attempts=1)
def quick(key: str) -> dict[str, Any]:
    """Start, wait at the gate every ``quick`` body shares (``gate-go``), run 0.25 s, end:
    one attempt only."""
    mark("start", key)
    hold("go")
    time.sleep(0.25)
    mark("end", key)
    return {"key": key, "pid": os.getpid()}


@job(queue="outage", max_attempts=1)
def stepped(key: str) -> str:
    """A step before the gate, one after: the second is the first write after a restart."""
    first: str = step.run("first", lambda: f"{key}-1")
    mark("start", key)
    hold(key)
    second: str = step.run("second", lambda: f"{key}-2")
    mark("end", key)
    return f"{first}+{second}"


@job(queue="outage", max_attempts=1)
def poison(kind: str) -> Any:
    """Outcomes the database would refuse as they are (a NUL in an error or in a result)."""
    mark("start", kind)
    if kind == "nul-error":
        raise ValueError("bad\x00byte")
    if kind == "nul-output":
        return {"text": "a\x00b", "ok": True}
    if kind == "long-nul-error":
        raise ValueError("x" * 100_000 + "\x00")
    return kind
