"""The bridge worker's events switched on with ``-E``: worker-online/heartbeat/offline, and the wiring.

Why it exists: with ``-E`` (``celery worker -E`` or ``ujobs-bridge worker -E``) or the app's
``worker_send_task_events``, a monitor must see the bridge worker as it sees a Celery worker.
The engine's worker knows nothing of Celery; ``CeleryApp`` (``loading.py``) calls these
functions from its lifecycle hooks:

* ``start`` (``on_worker_init``, main process): the switch (``event_switch.share``) is set from
  ``-E``/``worker_send_task_events``, the process's emitter is pointed at the worker's database,
  task events are bound to the node name the worker was given (``worker_signals``' hostname,
  Celery's ``celery@host`` / ``-n``), and the heart is built;
* ``ready`` (``on_worker_ready``): the heart starts: ``worker-online``, then ``worker-heartbeat``
  every ``freq`` seconds (Celery's 2.0 unless ``--heartbeat-interval``) with Celery's fields
  (freq, active, processed, loadavg, sw_ident, sw_ver, sw_sys), ``heartbeat_sent`` fired each time;
* ``shutdown`` (``on_worker_shutdown``): ``worker-offline``, a last flush within a deadline;
* ``child_start`` / ``child_stop`` (a ``--pool processes`` child): the child maps the switch and
  emits its task events for the same node and main pid.

Remote control (``celery -A proj control enable_events|disable_events``) flips the engine
worker's ``send_task_events`` (``ujobs_bridge/worker/control.py``); ``start`` sets it from
``-E`` and hooks ``event_switch.set_enabled`` to it. As in Celery, ``disable_events`` stops
task events only: a worker whose events were ever on keeps its heartbeat, so monitors do not
take it for dead; one started without ``-E`` that gets ``enable_events`` goes online at its
next beat.

What it is not: the task events (``task_events.py``) or their transport (``event_emitter.py``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from celery import signals
from celery.utils.sysinfo import load_average
from celery.worker.state import SOFTWARE_INFO

from celery_compat.events import switch as event_switch
from celery_compat.events import task_events
from celery_compat.events.emitter import EventEmitter, close_emitter, emitter_for
from ujobs_bridge.ext.worker import Service

log = logging.getLogger("celery_compat.events")

HEARTBEAT_S = 2.0  # Celery's Heart interval when --heartbeat-interval is not given
ENV_WORKER_PID = "UJOBS_CELERY_WORKER_PID"  # task events from pool children carry the main pid


def wanted(app: Any, options: Mapping[str, Any]) -> bool:
    """``-E`` given, or the app's ``worker_send_task_events``."""
    return bool(options.get("task_events")) or bool(app.conf.get("worker_send_task_events"))


class Heart(Service):
    """``worker-online``, then ``worker-heartbeat`` every ``freq`` seconds, ``worker-offline``
    at the end; only once events are (or were) on in this worker."""

    def __init__(
        self, emitter: EventEmitter, worker: Any, hostname: str, pid: int, freq: float
    ) -> None:
        super().__init__("celery-heart", interval_s=freq)
        self.emitter = emitter
        self.worker = worker
        self.hostname = hostname
        self.pid = pid
        self.freq = freq
        self.online = False

    def tick(self) -> None:
        if not self.online and not event_switch.enabled():
            return
        self._send("worker-heartbeat" if self.online else "worker-online")
        self.online = True

    def offline(self) -> None:
        if self.online:
            self._send("worker-offline")
            self.online = False

    def _send(self, type_: str) -> None:
        if signals.heartbeat_sent.receivers:
            signals.heartbeat_sent.send(sender=self)
        self.emitter.emit(
            type_,
            self.hostname,
            self.pid,
            freq=self.freq,
            active=_active(self.worker),
            processed=_processed(self.worker),
            loadavg=load_average(),
            **SOFTWARE_INFO,
        )
        self.emitter.wake()


def _active(worker: Any) -> int:
    """Attempts whose body runs now (Celery's ``active_requests``; prefetched ones are not)."""
    table = getattr(worker, "table", None)
    if table is None:
        return 0
    return sum(1 for e in table.entries() if (e.started or e.future is not None) and not e.settled)


def _processed(worker: Any) -> int:
    """Messages this worker finished (Celery's ``all_total_count``)."""
    counts = getattr(worker, "counts", None)
    if counts is None:
        return 0
    return int(counts.done + counts.retried + counts.dead + counts.cancelled)


class WorkerEvents:
    """What one worker's events hold between ``start`` and ``shutdown`` (main process)."""

    def __init__(self, app: Any, emitter: EventEmitter, heart: Heart) -> None:
        self.app = app
        self.emitter = emitter
        self.heart = heart

    def ready(self) -> None:
        self.heart.start()

    def shutdown(self) -> None:
        """``worker-offline`` and a last flush; never raises (the worker is exiting)."""
        try:
            self.heart.stop()
            self.heart.offline()
            task_events.unbind_node()
            close_emitter(self.app)
        except Exception:
            log.exception("celery_compat.events.shutdown_failed")
        finally:
            event_switch.release()


def start(
    app: Any, worker: Any, options: Mapping[str, Any], hostname: str, dsn: str | None
) -> WorkerEvents | None:
    """Before the worker starts (and spawns pool children): switch, emitter, node, heart.
    Never raises: a worker whose events cannot be set up runs without them (logged)."""
    try:
        return _start(app, worker, options, hostname, dsn)
    except Exception:
        log.exception("celery_compat.events.start_failed: the worker runs without events")
        return None


def _start(
    app: Any, worker: Any, options: Mapping[str, Any], hostname: str, dsn: str | None
) -> WorkerEvents:
    on = wanted(app, options)
    event_switch.share(on)
    if hasattr(worker, "task_events_hooks"):  # remote enable_events/disable_events flip the
        worker.set_task_events(on)  # engine worker's send_task_events: the switch follows it
        worker.task_events_hooks.append(event_switch.set_enabled)
    pid = os.getpid()
    os.environ[ENV_WORKER_PID] = str(pid)
    emitter = emitter_for(app, dsn=dsn)
    task_events.bind_node(emitter, hostname, pid)
    freq = float(options.get("heartbeat_interval") or HEARTBEAT_S)
    if on:
        where = "Postgres" + (" and the broker" if emitter.broker else "")
        log.info("celery_compat.events.on: %s sends task and worker events to %s", hostname, where)
    return WorkerEvents(app, emitter, Heart(emitter, worker, hostname, pid, freq))


def child_start(app: Any, hostname: str, dsn: str | None) -> None:
    """In a ``--pool processes`` child: its task events, for the worker's node."""
    event_switch.attach()
    pid = int(os.environ.get(ENV_WORKER_PID) or os.getppid())
    task_events.bind_node(emitter_for(app, dsn=dsn), hostname, pid)


def child_stop(app: Any) -> None:
    task_events.unbind_node()
    close_emitter(app)
