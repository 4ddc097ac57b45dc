"""The child side of ``--pool processes``: import the ``-A`` module once, run bodies by name,
one at a time, for as long as the parent lives.

Why it exists: CPU-bound bodies need processes, as Celery's prefork pool gives them. The child
resolves a job name through the registry it built from the operator's ``-A`` module — never by
importing a name taken from the row — and answers with plain tuples (JSON text, error text, a
suspension's wake time), not pickled objects, so nothing from the database is unpickled. Durable
steps work in the child too: it writes them under the attempt's lease token on its own pool.

The child ignores SIGINT and SIGTERM (a signal to the whole process group reaches it too): it
exits when the parent says so, running its exit hooks (the app's, atexit's: an OpenTelemetry
provider flushes its spans there), or is killed by the parent. It dies with its parent: it asks
the kernel for SIGKILL when the parent's thread that spawned it ends (``PR_SET_PDEATHSIG``, Linux), and a watch thread waits on the parent as the
fallback elsewhere (and runs the exit hooks first, then exits).

What it is not: a lease keeper or the pool (``children.py``). Leases, fencing and outcomes stay
in the parent, which kills the child of a body it stops (timeout, cancel, lost lease).
"""

from __future__ import annotations

import atexit
import ctypes
import multiprocessing
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from ujobs_bridge._internal.clock import SYSTEM_CLOCK
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db.connections import Conn, Pool, Role
from ujobs_bridge._internal.db.steps import Lease
from ujobs_bridge._internal.jobs import context
from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.jobs.error_text import error_text
from ujobs_bridge._internal.jobs.group_commit import GroupCommit
from ujobs_bridge._internal.jobs.outcomes import Cancel, Discard, Fail, Snooze
from ujobs_bridge._internal.jobs.payload import DEFAULT_MAX_RESULT_BYTES
from ujobs_bridge._internal.observe import logs
from ujobs_bridge._internal.worker import pool_limits
from ujobs_bridge._internal.worker.attempt import BodyResult, RemoteJobError, retries, run_body
from ujobs_bridge._internal.worker.steering import TaskSettings
from ujobs_bridge.errors import (
    DatabaseUnavailableError,
    ErrorCode,
    PayloadError,
    StepError,
    StepSuspended,
)
from ujobs_bridge.job import JobDefinition
from ujobs_bridge.records import ClaimedJob
from ujobs_bridge.steps import StepRunner

# the worker's (--time-limit, --soft-time-limit): defaults for the jobs that set none
TimeLimits = tuple[float | None, float | None]

_registry: dict[str, JobDefinition[Any, Any]] = {}
_dsn: list[str] = []
_pool: list[Pool] = []
_app: list[Any] = []  # the LoadedApp of -A, once loaded
_settings: list[Any] = [None]  # the task settings last applied (see child_run)
_lock = threading.Lock()

Reply = tuple[Any, ...]
# A child's note to its keeper: the body says its real work starts now (``work_starts``, a
# body whose definition has ``work_starts_late``); the keeper queues its start.
WORK_STARTS = ("work_starts",)


PR_SET_PDEATHSIG = 1


def child_main(
    conn: Connection,
    app_spec: str | None,
    dsn: str,
    node: str,
    parent_pid: int,
    limits: TimeLimits = (None, None),
    log_setup: tuple[int | str, logs.LogFormat, str | None] | None = None,
) -> None:
    """A pool child's life: die with the parent, log as the parent does (``log_setup``: its
    level, ``--log-format`` and ``-f``), load ``-A`` (with the worker's default time ``limits``),
    say ready, then run one claimed job per message (``(claimed, task settings)``) until told to
    stop (``None``) or the parent's end of the pipe closes. Each answer is ``(reply, resident
    KiB)``: the parent recycles a child over ``--max-memory-per-child``."""
    _die_with_parent(parent_pid)
    if log_setup is not None:
        logs.setup(*log_setup)
    try:
        child_init(app_spec, dsn, node, limits)
    except BaseException as exc:  # the parent reports it, for the job it wanted to run here
        conn.send(("init_failed", error_text(exc)))
        return
    pool_limits.attach(conn)  # the time limits of its bodies are the pool's from now on
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message is None:
            return
        if os.getppid() != parent_pid:  # killed while the job was in the pipe: never start it
            return
        try:
            reply = child_run(*message)
        except BaseException as exc:  # e.g. a name this child's registry lacks: fail this attempt
            reply = ("error", error_text(exc), False)  # (error_text never raises)
        conn.send((reply, resident_kib()))


def resident_kib() -> int:
    """This process's resident memory now, in KiB (Linux's ``/proc``; elsewhere its peak,
    ``ru_maxrss``, which Linux and BSD give in KiB and macOS in bytes)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak // 1024 if sys.platform == "darwin" else peak


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this child when its parent's spawning thread ends (Linux); if the parent is
    already gone, exit now."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watch thread (``_on_exit``) still ends the child
    if os.getppid() != parent_pid:
        os._exit(1)


def child_init(
    app_spec: str | None, dsn: str, node: str = "", limits: TimeLimits = (None, None)
) -> None:
    """Load ``-A`` in this child through its loader, with the worker's default time ``limits``
    applied as in the parent, and bind the app to the parent's ``dsn`` (passed here, never
    through the environment); ``node``: the parent's node name."""
    if node:
        context.set_node_name(node)
    # The parent decides when to stop: a Ctrl-C or a SIGTERM sent to the whole process group
    # (a terminal, systemd's default KillMode) reaches the child too, and must neither cut its
    # body short (the parent's shutdown lets it finish, or hands it back and kills the child)
    # nor skip its exit hooks (an OpenTelemetry batch of spans is flushed by them).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _dsn.append(dsn)
    if app_spec is None:
        _on_exit(lambda: None)
        return
    app = loading.resolve(app_spec)
    app.apply_time_limits(*limits)
    _registry.update(loading.jobs_of(app))
    app.bind(dsn)
    _app.append(app)
    _on_exit(app.on_process_shutdown)
    app.on_process_init()


def _on_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` once as this child ends: at a normal exit (the pool's shutdown), or when the
    parent is gone first (its worker exits without waiting for the pool): then the child would
    wait on its call queue forever, so it runs the hook and exits."""
    once = threading.Lock()

    def run() -> None:
        if once.acquire(blocking=False):
            hook()

    def parent_gone() -> None:
        parent = multiprocessing.parent_process()
        if parent is None:
            return
        parent.join()
        try:
            run()
        finally:
            os._exit(0)

    atexit.register(run)
    threading.Thread(target=parent_gone, name="ujobs-parent-watch", daemon=True).start()


def _connection() -> AbstractContextManager[Conn]:
    with _lock:
        if not _pool:
            role = Role(f"worker:child:{os.getpid()}:steps")
            _pool.append(connections.pool(_dsn[0], role, max_size=2))
    return _pool[0].connection()


_commits = GroupCommit(_connection)  # the child's step results (steps gathered by an async body)


def child_run(
    claimed: ClaimedJob,
    settings: TaskSettings | None = None,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
) -> Reply:
    """Run one claimed job's body here through the attempt core, with the same
    ``current_job()`` and ``step`` a thread body gets (its signal never fires: a cancel is fenced
    when the child answers), and answer with a plain reply. ``settings``: the parent's task
    settings changed by remote control (``rate_limit``, ``time_limit``), applied to this child's
    app before the body when they differ from the last ones applied. ``max_result_bytes``: the
    worker's limit, checked here, so an oversize result never crosses the pipe."""
    if settings != _settings[0] and _app:
        _app[0].apply_task_settings(settings or {})
        _settings[0] = settings
    definition = _registry[claimed.name]
    runner = StepRunner(
        lease=Lease(claimed.id, claimed.lease_token, claimed.attempt),
        connection=_connection,
        signal=AttemptSignal(),
        clock=SYSTEM_CLOCK,
        commits=_commits,
        fresh=claimed.deliveries == 1,
    )
    starting = _work_starts_note() if definition.work_starts_late else None
    result = run_body(
        definition,
        claimed,
        runner.signal,
        runner,
        max_result_bytes=max_result_bytes,
        starting=starting,
    )
    return _reply(definition, result)


def _work_starts_note() -> Callable[[], object] | None:
    """What a body's ``work_starts()`` calls in this child: a note to the keeper, sent once
    (none outside a pool: a child run in a test)."""
    pipe = pool_limits.pipe()
    if pipe is None:
        return None
    sent: list[bool] = []

    def note() -> None:
        if not sent:
            sent.append(True)
            pipe.send(WORK_STARTS)

    return note


def _reply(definition: JobDefinition[Any, Any], result: BodyResult) -> Reply:
    exc = result.error
    if exc is None:
        return ("ok", result.output_json)
    if isinstance(exc, StepSuspended):
        wake = exc.wake_at.isoformat() if isinstance(exc.wake_at, datetime) else None
        return ("suspend", exc.state, wake, exc.reason)
    if isinstance(exc, Snooze):
        return ("snooze", exc.delay_s)
    if isinstance(exc, Cancel):
        return ("cancel", exc.reason)
    if isinstance(exc, Discard):
        return ("discard", exc.reason)
    if isinstance(exc, Fail):
        return ("fail", exc.error, exc.kind)
    if isinstance(exc, StepError):
        return ("step_error", exc.message, exc.hint, exc.code.value)
    if isinstance(exc, DatabaseUnavailableError):  # the outage's, handed back as in a thread
        return ("outage", exc.message, exc.hint)
    # the parent's decision table, for what only the child can judge (the exception's class);
    # a body's SystemExit or KeyboardInterrupt is its failure, not the child's end
    retryable = not isinstance(exc, PayloadError) and retries(definition, exc)
    return ("error", error_text(exc), retryable)


def body_result_from_child(reply: Reply) -> BodyResult:
    """Turn a child's plain reply back into the parent's ``BodyResult``."""
    kind = reply[0]
    if kind == "ok":
        return BodyResult(output_json=reply[1])
    if kind == "suspend":
        wake = datetime.fromisoformat(reply[2]) if reply[2] else None
        return BodyResult(error=StepSuspended(reply[1], wake, reply[3]))
    if kind == "snooze":
        return BodyResult(error=Snooze(reply[1]))
    if kind == "cancel":
        return BodyResult(error=Cancel(reply[1]))
    if kind == "discard":
        return BodyResult(error=Discard(reply[1]))
    if kind == "fail":
        return BodyResult(error=Fail(reply[1], reply[2]))
    if kind == "step_error":
        return BodyResult(error=StepError(reply[1], hint=reply[2], code=ErrorCode(reply[3])))
    if kind == "outage":
        return BodyResult(error=DatabaseUnavailableError(reply[1], hint=reply[2]))
    return BodyResult(error=RemoteJobError(reply[1], reply[2]))
