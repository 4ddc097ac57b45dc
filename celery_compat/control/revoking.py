"""A Celery revoke made durable, whoever sends it: record the id, cancel its rows, store REVOKED.

Why it exists: a revoke reaches the bridge through several doors. ``app.control.revoke`` of a
bridge app (``app_control.py``), the raw ``broadcast('revoke')`` Celery's own CLI sends
(``celery -A proj control revoke|terminate``), and a plain Celery app or Flower revoking over the
cutover broker, which only a bridge worker's pidbox hears (``broker.py`` → the worker's
``revoke``/``terminate`` commands, ``worker_commands.py``). Each must have the same effect, so
every door calls ``revoke_tasks``: the id is written to ``x_celery_revoked`` (NOTIFYed to every
worker, so ``inspect revoked`` lists it and a claimed message is dropped before its body,
``revoked_ids.py``); the task's rows no worker runs are cancelled (a later message of the id is
born cancelled); with ``terminate`` a running row is cancelled too, which interrupts its body
(``execution.py``); REVOKED is stored where no worker owns the state yet, as Celery 5.7's worker
does. Celery's arguments are taken as Celery takes them: ``terminate`` by truthiness (Flower
sends ``0``/``1``), ``signal`` as a name (``KILL``, ``SIGKILL``) or a number (``9``).

A worker that receives a revoke already recorded (the caller recorded it, or another worker
did) does nothing more than one primary-key read per id (``already_recorded``).

What it is not: the in-memory set of revoked ids (``revoked_ids.py``), stamped-header revokes
(``stamp_revokes.py``), or the replies (``worker_commands.py``).
"""

from __future__ import annotations

import signal as signals
from collections.abc import Iterable
from typing import Any

import psycopg
from celery import states
from celery.exceptions import TaskRevokedError
from celery.platforms import signals as celery_signals

from celery_compat.db import message_jobs, revocations
from celery_compat.sending.send_options import (
    MAX_TASK_NAME_BYTES,
    SendOptionValueError,
    text_problem,
)
from ujobs_bridge.ext import control as remote

LIVE_NOT_RUNNING = ("ready", "sleeping", "waiting")
REVOCABLE_STATES = (states.PENDING, states.RECEIVED, states.RETRY, states.REJECTED)
DEFAULT_SIGNAL = "SIGTERM"


def signal_name(signal: Any) -> str:
    """Celery's ``signal`` argument as a signal's name (``"SIGKILL"``): what Celery's worker
    accepts (a number, or an upper-case name with or without ``SIG``), plus a number sent as
    text (``"9"``: a form field or a command-line word). ``ValueError`` for anything else."""
    if signal is None or signal == "":
        return DEFAULT_SIGNAL
    if isinstance(signal, str) and signal.strip().isdigit():
        signal = int(signal.strip())
    try:
        number = celery_signals.signum(signal)
        return signals.Signals(int(number)).name
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(
            f"unknown signal {signal!r}: give a number or an upper-case name (KILL, SIGTERM)"
        ) from exc


def already_recorded(conn: psycopg.Connection[Any], task_id: str, terminate: bool) -> bool:
    """Is ``task_id`` revoked already, with ``terminate`` if this revoke asks for it?"""
    flag = revocations.revoked_terminate(conn, task_id)
    return flag is not None and (flag or not terminate)


def revoke_tasks(
    app: Any,
    task_ids: Iterable[Any],
    *,
    terminate: Any = False,
    signal: Any = None,
    skip_recorded: bool = False,
) -> list[str]:
    """Revoke ``task_ids`` (see the module docstring); returns the ids this call recorded.
    ``skip_recorded``: leave an id that is already revoked as it is (a worker hearing a revoke
    its sender, or another worker, recorded)."""
    terminate = bool(terminate)
    name = signal_name(signal) if terminate else DEFAULT_SIGNAL  # refused before any write
    ids = [str(t) for t in task_ids]
    for tid in ids:  # refused before any write: no message can carry such an id
        problem = text_problem(tid, MAX_TASK_NAME_BYTES)
        if problem is not None:
            raise SendOptionValueError(
                f"revoke: the task id {tid[:80]!r} {problem}",
                hint="pass the id of a sent task (AsyncResult.id)",
            )
    backend = app.backend
    done: list[str] = []
    with app.ujobs_client.pool.connection() as conn:
        for tid in ids:
            if skip_recorded and already_recorded(conn, tid, terminate):
                continue
            revocations.revoke(conn, tid, terminate=terminate)
            done.append(tid)
            running = False
            for job_id, state, _error, _at in message_jobs.jobs_of_task(conn, tid):
                if state in LIVE_NOT_RUNNING:
                    remote.job_cancel(conn, job_id, "UJ_JOB_CANCELLED: revoked")
                elif state == "running":
                    running = True
                    if terminate:
                        # The worker drops it if its body has not started yet, and interrupts
                        # the body if it has (execution._terminates), then stores REVOKED.
                        # Without terminate the row stays as it is: a started body finishes, as
                        # in Celery, and a claimed one whose body has not started is dropped by
                        # its worker, which stores REVOKED (revoked_ids.py, execution.py).
                        # Celery's word for it (``mark_as_revoked(reason="terminated")``)
                        remote.job_cancel(conn, job_id, f"UJ_JOB_CANCELLED: terminated ({name})")
            if not running:
                mark_revoked(backend, tid)
    return done


def mark_revoked(backend: Any, task_id: str) -> None:
    """Store REVOKED as Celery 5.7's worker does: only over a state no worker owns yet (a
    result, or STARTED/a custom state set by a running task, is left alone)."""
    meta = backend.get_task_meta(task_id, cache=False)
    if meta.get("status") in REVOCABLE_STATES:
        backend.store_result(task_id, TaskRevokedError("revoked"), states.REVOKED)
