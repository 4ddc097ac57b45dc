"""``start_worker``: a real bridge worker in this process, for tests (``celery.contrib.testing.worker``).

Why it exists: Celery's ``start_worker(app)`` runs a ``WorkController`` in a thread against the
app's broker so a test can ``add.delay(2, 2).get()``. With a celery_compat app the queue is the
app's Postgres database, so this runs ``ujobs_bridge.Worker`` (claim loop, leases, body
threads) with one job per app task (``celery_compat.worker.execution.jobs_for_app``), consuming the
queues Celery's worker would: the app's declared queues (``task_queues``, else the default
queue) plus every queue a task routes to (task ``queue=``, ``task_routes``). On exit it stops
claiming and waits for the work in flight (up to ``shutdown_timeout``).

It keeps Celery's shape: the same arguments (``concurrency``, ``pool``, ``loglevel``,
``logfile``, ``perform_ping_check``, ``ping_task_timeout``, ``shutdown_timeout``, extra keywords
accepted), the same ``test_worker_starting``/``started``/``stopped`` signals, the app set as
current and default, the ``celery.ping`` round trip before the block runs, and
``celery.worker.state`` kept as a Celery worker in this process keeps it (tests read
``worker_state.successful_requests``).

What it is not: Celery's worker. ``pool`` is always threads in this process (``solo``,
``prefork`` and ``threads`` all mean that); the task registry is read at start and again by
``reload()`` (as on Celery, call it after defining tasks once the worker runs: it also starts
consuming the queues those tasks route to). It registers a node named ``hostname`` (Celery's
default ``gen<pid>@<host>``) that answers remote control (``app.control.inspect()``, Celery's
own test ``Manager``) as any bridge worker does. The tasks' database is the app's
(``app.ujobs_client``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from celery import signals, states
from celery.contrib.testing.worker import (
    setup_app_for_worker,
    test_worker_started,
    test_worker_starting,
    test_worker_stopped,
)
from celery.result import _set_task_join_will_block, allow_join_result
from celery.utils.imports import reload_from_cwd
from celery.utils.nodenames import anon_nodename
from celery.worker import state as worker_state

from celery_compat.control import worker_commands as worker_control
from celery_compat.worker import revoked_ids
from celery_compat.worker import settings as worker_settings
from celery_compat.worker.execution import jobs_for_app
from ujobs_bridge import Worker, WorkerConfig
from ujobs_bridge.ext import loaders as loading

WORKER_LOGLEVEL = os.environ.get("WORKER_LOGLEVEL", "error")
POOLS = ("solo", "prefork", "threads", "eventlet", "gevent")
DEFAULT_POLL_S = 0.1  # ETA tasks come due without a NOTIFY: look often, tests are short


class TestWorker:
    """What ``start_worker`` yields: the app, a node name, and the bridge worker it runs."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        app: Any,
        worker: Worker,
        hostname: str,
        pool: str,
        given_queues: tuple[str, ...] | None = None,
    ) -> None:
        self.app = app
        self.worker = worker
        self.hostname = hostname
        self.pool = pool
        self.concurrency = worker.config.concurrency
        self.queues = worker.queues
        self._given_queues = given_queues  # start_worker(queues=...): kept by reload()

    def __repr__(self) -> str:
        return f"<celery_compat TestWorker {self.hostname} queues={list(self.queues)}>"

    @property
    def in_flight(self) -> int:
        """Jobs this worker holds right now (running or waiting for a free thread)."""
        return self.worker.in_flight()

    def ensure_started(self) -> None:
        """Celery's name for 'wait until consuming'; ``start()`` returns only once it is."""
        self.worker.start()

    def stop(self, timeout_s: float | None = None) -> None:
        self.worker.stop(timeout_s=timeout_s)

    def reload(self, modules: Any = None, reload: bool = False, reloader: Any = None) -> None:
        """Celery's ``WorkController.reload``: import the app's task modules (``modules``, default
        ``app.loader.task_modules``; re-import them if ``reload``), then run every task the app
        has now, from the next claim on, consuming its queues again (unless ``start_worker`` was
        given ``queues=``). Tasks in flight finish as they started."""
        wanted = self.app.loader.task_modules if modules is None else (modules or ())
        for module in set(wanted):
            if module not in sys.modules:
                self.app.loader.import_from_cwd(module)
            elif reload:
                reload_from_cwd(sys.modules[module], reloader)
        jobs = jobs_for_app(self.app)
        self.worker.reload(loading.build(jobs), self._given_queues or app_queues(self.app, jobs))
        self.queues = self.worker.queues


@dataclass(frozen=True)
class _Request:
    """What ``celery.worker.state`` keeps of a request: its id and task name."""

    id: str
    name: str


class _WorkerState:
    """Keep ``celery.worker.state`` (``active_requests``, ``successful_requests``, counts) as a
    Celery worker in this process would, from the tracer's prerun/postrun signals."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def _ours(self, task: Any) -> bool:
        return getattr(task, "_app", None) is self.app or getattr(task, "app", None) is self.app

    def prerun(self, sender: Any = None, task_id: Any = None, task: Any = None, **_: Any) -> None:
        if task_id is not None and self._ours(task):
            worker_state.task_accepted(_Request(str(task_id), str(task.name)))

    def postrun(
        self, sender: Any = None, task_id: Any = None, task: Any = None, state: Any = None, **_: Any
    ) -> None:
        if task_id is not None and self._ours(task):
            request = _Request(str(task_id), str(task.name))
            worker_state.task_ready(request, successful=state == states.SUCCESS)

    def connect(self) -> None:
        signals.task_prerun.connect(self.prerun, weak=False)
        signals.task_postrun.connect(self.postrun, weak=False)

    def disconnect(self) -> None:
        signals.task_prerun.disconnect(self.prerun)
        signals.task_postrun.disconnect(self.postrun)


def app_queues(app: Any, jobs: list[Any]) -> tuple[str, ...]:
    """The queues a Celery worker of ``app`` consumes by default, plus every routed task queue
    and every task's own ``queue=`` (the router alone does not read that attribute)."""
    names = {str(name) for name in app.amqp.queues}
    names.update(str(d.queue) for d in jobs)
    names.update(
        str(getattr(q, "name", q)) for t in app.tasks.values() if (q := getattr(t, "queue", None))
    )
    default = app.conf.task_default_queue or "celery"
    return (default, *sorted(names - {default}))


def _queue_list(queues: Any) -> tuple[str, ...] | None:
    if not queues:
        return None
    if isinstance(queues, str):
        queues = queues.split(",")
    return tuple(str(q).strip() for q in queues if str(q).strip())


def _build_worker(
    app: Any,
    concurrency: int,
    pool: str,
    queues: tuple[str, ...] | None,
    options: dict[str, Any],
    hostname: str,
) -> Worker:
    if pool not in POOLS:
        raise ValueError(f"start_worker(pool={pool!r}): use one of {', '.join(POOLS)}")
    jobs = jobs_for_app(app)
    config = WorkerConfig(
        queues=queues or app_queues(app, jobs),
        concurrency=concurrency,
        pool="threads",
        prefetch_multiplier=int(options.pop("prefetch_multiplier", 1)),
        poll_s=float(options.pop("poll_interval", DEFAULT_POLL_S)),
        lease_s=float(options.pop("lease_s", 10.0)),
        unregistered_dead_after_s=worker_settings.UNKNOWN_TASK_FAILS_AFTER_S,
    )
    return Worker(
        app.ujobs_client.dsn,
        loading.build(jobs),
        config,
        channels=(revoked_ids.channel(),),
        node_name=hostname,
        control=(worker_control.command_set(app),),
        control_encode=worker_control.encode,
    )


@contextlib.contextmanager
def start_worker(
    app: Any,
    concurrency: int = 1,
    pool: str = "threads",
    loglevel: str | int = WORKER_LOGLEVEL,
    logfile: str | None = None,
    perform_ping_check: bool = True,
    ping_task_timeout: float = 10.0,
    shutdown_timeout: float = 10.0,
    **kwargs: Any,
) -> Iterator[TestWorker]:
    """Run a bridge worker for ``app`` in this process for the duration of the block.

    Extra keywords: ``queues`` (list or comma string; default: the app's queues),
    ``hostname``, ``prefetch_multiplier`` (default 1), ``poll_interval`` (seconds, default 0.1),
    ``lease_s``; Celery-only worker options are accepted and ignored.
    """
    test_worker_starting.send(sender=app)
    worker: TestWorker | None = None
    try:
        if perform_ping_check:
            # lazy: importing it registers celery.ping, wanted only for the ping check
            from celery.contrib.testing import tasks as _ping_tasks

            del _ping_tasks
        setup_app_for_worker(app, loglevel, logfile)
        if perform_ping_check:
            assert "celery.ping" in app.tasks
        hostname = str(kwargs.pop("hostname", None) or anon_nodename())
        queues = _queue_list(kwargs.pop("queues", None))
        bridge = _build_worker(app, concurrency, pool, queues, kwargs, hostname)
        worker = TestWorker(app, bridge, hostname, pool, queues)
        tracked = _WorkerState(app)
        tracked.connect()
        bridge.start()
        try:
            _set_task_join_will_block(False)
            test_worker_started.send(sender=app, worker=worker, consumer=None)
            if perform_ping_check:
                with allow_join_result():
                    ping = app.tasks["celery.ping"]
                    assert ping.delay().get(timeout=ping_task_timeout) == "pong"
            yield worker
        finally:
            bridge.stop(timeout_s=shutdown_timeout)
            tracked.disconnect()
    finally:
        test_worker_stopped.send(sender=app, worker=worker)


__all__ = ["TestWorker", "app_queues", "start_worker"]
