"""Named fault points: inert in production, armed by ``UJOBS_FAULTS`` in fault tests.

Why it exists: the hard failures (a worker killed right after a step was persisted, a commit
that lands while the client sees an error) happen between two lines of our code, and a test can
only hit that gap if the code names it. ``fault("step.after_persist")`` does nothing unless the
environment arms that point, e.g. ``UJOBS_FAULTS="step.after_persist=kill@2"``: SIGKILL this
process on the second time the point is reached. Actions: ``kill``, ``raise`` (RuntimeError),
``exec_then_raise`` (psycopg.OperationalError: the caller sees an error for a write that
committed), ``sleep:<ms>``, ``pause`` (SIGSTOP self), ``exit`` (SystemExit: what no
``except Exception`` catches, so it ends the thread it is raised in).

What it is not: a chaos tool for production. Reading it costs one dict lookup per point.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass

import psycopg

ENV = "UJOBS_FAULTS"


@dataclass
class _Armed:
    action: str
    on_hit: int
    hits: int = 0


def _parse(text: str) -> dict[str, _Armed]:
    armed: dict[str, _Armed] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        point, _, rest = part.partition("=")
        action, _, nth = rest.partition("@")
        armed[point.strip()] = _Armed(action.strip() or "raise", int(nth) if nth else 1)
    return armed


_ARMED = _parse(os.environ.get(ENV, ""))
_lock = threading.Lock()


def fault(point: str) -> None:
    """Act if ``point`` is armed and this is the hit it is armed for."""
    if not _ARMED:
        return
    armed = _ARMED.get(point)
    if armed is None:
        return
    with _lock:
        armed.hits += 1
        if armed.hits != armed.on_hit:
            return
    action = armed.action
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "pause":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action.startswith("sleep:"):
        threading.Event().wait(int(action.split(":", 1)[1]) / 1000)
    elif action == "exit":
        raise SystemExit(f"fault {point}: injected exit")
    elif action == "exec_then_raise":
        raise psycopg.OperationalError(
            f"fault {point}: the write committed but the client saw an error"
        )
    else:
        raise RuntimeError(f"fault {point}: injected failure")
