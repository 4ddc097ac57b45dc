"""``revoke_by_stamped_headers`` on a bridge worker: Celery's in-memory revoked stamps.

Why it exists: Celery's ``app.control.revoke_by_stamped_headers({"monitoring_id": [...]})``
broadcasts to the live workers, each adds the values to ``celery.worker.state.revoked_stamps``
and, before running a request, discards it (REVOKED, ``task_revoked``) when one of its stamped
headers carries a revoked value (``Request.revoked``). A bridge worker receives the broadcast
over Postgres remote control (``worker_control.py``) and keeps the same
``worker_state.revoked_stamps`` mapping (so code that reads or clears it, as Celery's tests
do, sees the same thing); ``execution.run_message`` asks :func:`revoking_header` before a body
starts. With ``terminate=True`` the running tasks whose stamps match are revoked with
``terminate`` through the durable revoke (``control.py``).

What it is not: durable. As in Celery it is the memory of the worker process that got the
broadcast: a worker started later, or a ``--pool processes`` child (which runs bodies in another
process), does not know it. A durable revoke is by task id (``app.control.revoke``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery.utils.functional import maybe_list
from celery.worker import state as worker_state


def add(headers: Any) -> dict[str, Any]:
    """Record ``headers`` (``{header: value or [values]}`` or ``["header=value", ...]``) as
    revoked, as Celery's worker command does; returns them as a mapping."""
    if isinstance(headers, list | tuple):
        headers = dict(str(h).split("=", 1) for h in headers)
    wanted: dict[str, Any] = dict(headers or {})
    for header, stamps in wanted.items():
        known = maybe_list(worker_state.revoked_stamps.get(header) or [])
        worker_state.revoked_stamps[header] = list(known) + list(maybe_list(stamps))
    return wanted


def revoking_header(headers: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``{header: value}`` that revokes a message with these headers, else None
    (Celery's ``Request.revoked``: the first stamped header that has revoked values decides)."""
    revoked = worker_state.revoked_stamps
    if not revoked:
        return None
    stamps = headers.get("stamps") or {}
    for stamp in headers.get("stamped_headers") or []:
        if stamp not in revoked:
            continue
        value = stamps.get(stamp)
        wanted = revoked[stamp]
        if isinstance(value, list | tuple):
            for item in value:
                if item in maybe_list(wanted):
                    return {stamp: item}
            return None
        if value in maybe_list(wanted) or value == wanted:
            return {stamp: value}
        return None
    return None
