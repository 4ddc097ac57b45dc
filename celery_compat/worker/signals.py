"""Celery's worker signals, sent by the bridge worker at the moments Celery's worker sends them.

Why it exists: a Celery project does its per-process setup in receivers (``worker_process_init``
for database connections and Sentry, ``setup_logging`` for its logging config, ``worker_ready``
for health files). The engine's worker knows nothing of Celery; it calls the lifecycle hooks of
the app it loaded (``ujobs_bridge._internal.config.loading.LoadedApp.on_worker_*`` / ``on_process_*``) and
``CeleryApp`` answers them here, with Celery's senders and arguments:

main process, in Celery's order (``celery/apps/worker.py``, ``celery/worker/worker.py``)::

    celeryd_init(sender=hostname, instance, conf, options)
    worker_init(sender=instance)
    setup_logging(loglevel, logfile, format, colorize)      # or, with no receiver:
        after_setup_logger(logger=root, ...), after_setup_task_logger(logger=celery.task, ...)
    celeryd_after_setup(sender=hostname, instance, conf)
    worker_ready(sender=consumer)
    worker_shutting_down(sender=hostname, sig, how, exitcode)   # in the SIGTERM/SIGINT handler
    worker_shutdown(sender=instance)

each ``--pool processes`` child (``celery/concurrency/prefork.py``: ``process_initializer``,
``process_destructor``), a fresh interpreter as Celery's spawn children are, so its logging is
set up again first::

    setup_logging | after_setup_logger, after_setup_task_logger
    worker_process_init(sender=hostname)
    worker_process_shutdown(sender=hostname, pid, exitcode)

Celery's thread pool sends no ``worker_process_*`` (it has no child process); neither does the
bridge's. The worker and consumer Celery passes as senders are stood in for by ``WorkerInstance``
and ``ConsumerInstance``, which carry the attributes receivers read (``app``, ``hostname``,
``concurrency``, ``pool_cls``, ``loglevel``, ``logfile``, ``controller``) plus ``bridge``, the
engine's worker.

What it is not: task signals (``execution.py``, ``worker_request.py``), nor the worker itself.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celery import signals
from celery.utils.log import get_logger

from celery_compat.worker.request import HOSTNAME
from ujobs_bridge.ext.jobs import node_name

# What a spawned child reads to set up logging and name itself as the main process did (Celery's
# prefork children read CELERY_LOG_LEVEL / CELERY_LOG_FILE the same way).
ENV_LOGLEVEL = "CELERY_LOG_LEVEL"
ENV_LOGFILE = "CELERY_LOG_FILE"
ENV_HOSTNAME = "UJOBS_CELERY_HOSTNAME"
log = logging.getLogger("celery_compat.worker_signals")


@dataclass(eq=False)  # a sender: hashed by identity, as Celery's worker is
class WorkerInstance:
    """The worker as Celery's signals pass it (a ``WorkController`` there)."""

    app: Any
    hostname: str
    concurrency: int
    pool_cls: str
    loglevel: int
    logfile: str | None
    options: dict[str, Any] = field(default_factory=dict)
    bridge: Any = None
    pid: int = field(default_factory=os.getpid)


@dataclass(eq=False)  # a sender: hashed by identity, as Celery's worker is
class ConsumerInstance:
    """The consumer ``worker_ready`` is sent with (Celery's ``Consumer``)."""

    app: Any
    hostname: str
    controller: WorkerInstance


def _raise_errors(responses: list[tuple[Any, Any]]) -> None:
    """Celery's ``Signal.send`` returns a receiver's exception; Celery re-raises it."""
    for _, response in responses:
        if isinstance(response, Exception):
            raise response


def _level(value: Any) -> int:
    if isinstance(value, int):
        return value
    level = logging.getLevelName(str(value or "WARNING").upper())
    return level if isinstance(level, int) else logging.WARNING


def setup_logging(app: Any, loglevel: int, logfile: str | None) -> None:
    """Celery's ``Logging.setup_logging_subsystem``: ``setup_logging`` first; when no receiver
    takes it, logging is the worker's (the root logger's handlers are kept) and
    ``after_setup_logger`` / ``after_setup_task_logger`` follow. A receiver that takes it gets a
    root logger without the worker's handlers, as Celery leaves it."""
    fmt = app.conf.get("worker_log_format")
    colorize = bool(app.log.supports_color(None, logfile))
    root = logging.getLogger()
    before = list(root.handlers)
    root.handlers = []
    responses = signals.setup_logging.send(
        sender=None, loglevel=loglevel, logfile=logfile, format=fmt, colorize=colorize
    )
    if any(isinstance(r, Exception) for _, r in responses):
        root.handlers = before  # the error is logged where the worker logs
    _raise_errors(responses)
    if responses:
        return
    if before:
        root.handlers = before
    else:
        logging.basicConfig(level=loglevel, format=fmt, filename=logfile)
    root.setLevel(loglevel)
    _raise_errors(
        signals.after_setup_logger.send(
            sender=None,
            logger=root,
            loglevel=loglevel,
            logfile=logfile,
            format=fmt,
            colorize=colorize,
        )
    )
    task_logger = get_logger("celery.task")
    task_logger.setLevel(loglevel)
    _raise_errors(
        signals.after_setup_task_logger.send(
            sender=None,
            logger=task_logger,
            loglevel=loglevel,
            logfile=logfile,
            format=app.conf.get("worker_task_log_format"),
            colorize=colorize,
        )
    )


def worker_init(app: Any, bridge: Any, options: Mapping[str, Any]) -> WorkerInstance:
    """``celeryd_init``, ``worker_init``, logging, ``celeryd_after_setup``: before the worker
    starts. Leaves in the environment what a pool child needs to do the same."""
    app.loader.init_worker()  # as Celery's WorkController does first (the loader's own hook)
    hostname = str(getattr(bridge, "node", None) or HOSTNAME)  # the worker's node name
    loglevel = _level(options.get("loglevel"))
    logfile = options.get("logfile") or None
    config = getattr(bridge, "config", None)
    instance = WorkerInstance(
        app=app,
        hostname=hostname,
        concurrency=int(getattr(config, "concurrency", 1)),
        pool_cls=str(getattr(config, "pool", "threads")),
        loglevel=loglevel,
        logfile=logfile,
        options=dict(options),
        bridge=bridge,
    )
    _raise_errors(
        signals.celeryd_init.send(
            sender=hostname, instance=instance, conf=app.conf, options=dict(options)
        )
    )
    _raise_errors(signals.worker_init.send(sender=instance))
    setup_logging(app, loglevel, logfile)
    if options.get("pool") == "solo":  # Celery's solo pool: the main process is the pool process
        _raise_errors(signals.worker_process_init.send(sender=hostname))
    _raise_errors(
        signals.celeryd_after_setup.send(sender=hostname, instance=instance, conf=app.conf)
    )
    os.environ[ENV_LOGLEVEL] = str(loglevel)
    os.environ[ENV_HOSTNAME] = hostname
    if logfile:
        os.environ[ENV_LOGFILE] = str(logfile)
    return instance


def worker_ready(instance: WorkerInstance) -> None:
    consumer = ConsumerInstance(app=instance.app, hostname=instance.hostname, controller=instance)
    _raise_errors(signals.worker_ready.send(sender=consumer))


def worker_shutting_down(instance: WorkerInstance, signum: int, hurry: bool) -> None:
    """In the stop signal's handler, before the worker acts on it, as Celery's
    ``_shutdown_handler``: ``sig`` its name, ``how`` ``Warm`` (bodies may finish) or ``Cold`` (a
    second signal: handed back at once), ``exitcode`` the one this worker exits with (0: what
    was running is handed back, never lost). A receiver's error is logged, never stops the stop."""
    try:
        sig = signal.Signals(signum).name
    except ValueError:
        sig = str(signum)
    responses = signals.worker_shutting_down.send(
        sender=instance.hostname, sig=sig, how="Cold" if hurry else "Warm", exitcode=0
    )
    for receiver, response in responses:
        if isinstance(response, Exception):
            log.error("worker_shutting_down receiver %r raised %r", receiver, response)


def worker_shutdown(instance: WorkerInstance) -> None:
    _raise_errors(signals.worker_shutdown.send(sender=instance))


def process_init(app: Any) -> None:
    """In a pool child: logging as the main process set it up, then ``worker_process_init``."""
    app.loader.init_worker()
    app.loader.init_worker_process()
    setup_logging(
        app,
        _level(int(os.environ.get(ENV_LOGLEVEL) or logging.WARNING)),
        os.environ.get(ENV_LOGFILE),
    )
    _raise_errors(signals.worker_process_init.send(sender=child_hostname()))


def process_shutdown() -> None:
    """In a pool child, as it exits (Celery's ``process_destructor``)."""
    _raise_errors(
        signals.worker_process_shutdown.send(sender=child_hostname(), pid=os.getpid(), exitcode=0)
    )


def child_hostname() -> str:
    """The node name of the worker a pool child belongs to (its signals and events use it)."""
    return node_name() or os.environ.get(ENV_HOSTNAME) or HOSTNAME
