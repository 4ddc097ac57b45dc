"""A Celery app whose worker-signal receivers record what fired, in which process, with what.

Each receiver appends one line ``<signal> <pid> <detail>`` to the file named by
``SIGNAL_APP_LOG`` (one short ``O_APPEND`` write per line, so main process and pool children can
share it). With ``SIGNAL_APP_OWN_LOGGING=1`` the app handles ``setup_logging`` itself (then
Celery sends no ``after_setup_logger``); without it, only ``after_setup_logger`` is recorded.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import signals

from celery_compat import Celery

app = Celery("celery_signal_app")
app.conf.task_default_queue = "signals"


def record(name: str, detail: str = "") -> None:
    path = os.environ.get("SIGNAL_APP_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{name} {os.getpid()} {detail}\n".encode())
    finally:
        os.close(fd)


@signals.celeryd_init.connect
def on_celeryd_init(sender: Any, instance: Any, conf: Any, options: Any, **kw: Any) -> None:
    ok = instance.app is app and conf is app.conf and instance.hostname == sender
    record("celeryd_init", f"sender={sender} ok={ok} pool={options.get('pool')}")


@signals.worker_init.connect
def on_worker_init(sender: Any, **kw: Any) -> None:
    record("worker_init", f"ok={sender.app is app} concurrency={sender.concurrency}")


@signals.celeryd_after_setup.connect
def on_after_setup(sender: Any, instance: Any, conf: Any, **kw: Any) -> None:
    record("celeryd_after_setup", f"sender={sender}")


if os.environ.get("SIGNAL_APP_OWN_LOGGING"):

    @signals.setup_logging.connect
    def on_setup_logging(
        loglevel: Any, logfile: Any, format: Any, colorize: Any, **kw: Any
    ) -> None:
        record("setup_logging", f"loglevel={logging.getLevelName(loglevel)}")


@signals.after_setup_logger.connect
def on_after_setup_logger(logger: Any, loglevel: Any, **kw: Any) -> None:
    record("after_setup_logger", f"root={logger is logging.getLogger()} loglevel={loglevel}")


@signals.worker_process_init.connect
def on_process_init(sender: Any, **kw: Any) -> None:
    record("worker_process_init", f"sender={sender}")


@signals.worker_ready.connect
def on_ready(sender: Any, **kw: Any) -> None:
    record("worker_ready", f"ok={sender.app is app and sender.controller.app is app}")


@signals.worker_shutting_down.connect
def on_shutting_down(sender: Any, sig: str, how: str, exitcode: int, **kw: Any) -> None:
    record("worker_shutting_down", f"sender={sender} sig={sig} how={how} exitcode={exitcode}")


@signals.worker_shutdown.connect
def on_shutdown(sender: Any, **kw: Any) -> None:
    record("worker_shutdown", f"ok={sender.app is app}")


@signals.worker_process_shutdown.connect
def on_process_shutdown(sender: Any, pid: int, exitcode: int, **kw: Any) -> None:
    record("worker_process_shutdown", f"sender={sender} pid={pid} exitcode={exitcode}")


@app.task
def where() -> int:
    return os.getpid()
