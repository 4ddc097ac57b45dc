"""Run a worker for a loaded app until a signal: what both worker commands share.

Why it exists: ``ujobs-bridge worker`` and ``celery -A proj worker`` on a celery_compat app
(``celery_compat/worker.py``) parse their flags differently but run the same thing. ``WorkerFlags``
is what either was asked for, Celery's meaning already applied; ``serve`` checks the schema, loads
the jobs from ``-A`` (never from data), starts a ``Worker`` and turns SIGTERM/SIGINT into the
two-phase drain: stop claiming at once, wait for bodies up to ``--shutdown-timeout``, hand back
the rest with their attempt uncounted, exit 0. A second signal cuts the wait short. A worker whose
loop died (``Worker.failed``) hands back what it holds and exits ``EXIT_FAILED`` (70), for a
supervisor to restart it. The time limits are applied by the ``-A`` app
(``LoadedApp.apply_time_limits``) here and in every pool child; ``-B`` runs the leader-elected
scheduler in this process (``embedded_scheduler``), stopped before the worker drains.

What it is not: the click command and its flags (``cli/worker.py``, ``worker_flags.py``) or the
worker itself (``ujobs_bridge._internal.worker``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from types import FrameType
from typing import NoReturn

import click

from ujobs_bridge._internal.cli import worker_flags as flags
from ujobs_bridge._internal.cli.options import database
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.config.loading import LoadedApp
from ujobs_bridge._internal.config.schema_access import ensure_schema
from ujobs_bridge._internal.jobs.payload import DEFAULT_MAX_RESULT_BYTES
from ujobs_bridge._internal.observe import health, logs, metrics
from ujobs_bridge._internal.observe.logs import LogFormat
from ujobs_bridge._internal.observe.metrics_http import MetricsServer
from ujobs_bridge._internal.scheduling.scheduler import Scheduler
from ujobs_bridge._internal.worker.config import (
    DEFAULT_AUTOSCALE_KEEPALIVE_S,
    DEFAULT_CONCURRENCY,
    DEFAULT_LEASE_S,
    DEFAULT_POLL_S,
    DEFAULT_PREFETCH_MULTIPLIER,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    WorkerConfig,
)
from ujobs_bridge._internal.worker.loop import Worker
from ujobs_bridge.errors import ConfigError, ErrorCode

log = logging.getLogger("ujobs.worker")

EXIT_FAILED = (
    70  # EX_SOFTWARE: a loop died or its bodies hung past the cap; it handed back what it held
)


@dataclass(frozen=True)
class WorkerFlags:
    """What both worker commands were asked for, Celery's meaning already applied (``-n``
    checked, expanded by ``serve`` with the app's node prefix; ``-P`` mapped, ``-l`` a level);
    ``None``: not given (the app's setting or ours)."""

    queues: tuple[str, ...] | None = None
    exclude_queues: tuple[str, ...] = ()
    concurrency: int | None = None
    pool: str | None = None  # mapped onto ours; None: the app's worker_pool, else threads
    prefetch_multiplier: int | None = None
    lease_s: float = DEFAULT_LEASE_S
    poll_s: float = DEFAULT_POLL_S
    shutdown_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S
    loglevel: int = 20
    nodename: str | None = None
    pidfile: str | None = None
    logfile: str | None = None
    dsn: str | None = None
    task_events: bool = False
    log_format: LogFormat = "text"
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    time_limit: float | None = None
    soft_time_limit: float | None = None
    max_tasks_per_child: int | None = None
    max_memory_per_child: int | None = None  # KiB
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    max_hung_threads: int | None = None  # None: twice the concurrency
    autoscale: tuple[int, int] | None = None  # (max, min)
    autoscale_keepalive_s: float = DEFAULT_AUTOSCALE_KEEPALIVE_S
    beat: bool = False

    def config(self) -> WorkerConfig:
        """The worker's settings from the flags alone (checked before ``-A`` is imported)."""
        concurrency = DEFAULT_CONCURRENCY if self.concurrency is None else self.concurrency
        if self.autoscale is not None:
            if self.concurrency is not None:
                raise ConfigError(
                    f"-c {self.concurrency} and --autoscale {self.autoscale[0]},"
                    f"{self.autoscale[1]} both size the pool",
                    hint="drop -c: an autoscaled pool starts at MIN and grows to MAX",
                )
            concurrency = self.autoscale[1]
        return WorkerConfig(
            queues=self.queues,
            concurrency=concurrency,
            pool=self.pool or "threads",
            prefetch_multiplier=DEFAULT_PREFETCH_MULTIPLIER
            if self.prefetch_multiplier is None
            else self.prefetch_multiplier,
            lease_s=self.lease_s,
            poll_s=self.poll_s,
            shutdown_timeout_s=self.shutdown_s,
            max_tasks_per_child=self.max_tasks_per_child,
            max_memory_per_child_kib=self.max_memory_per_child,
            time_limit_s=self.time_limit,
            soft_time_limit_s=self.soft_time_limit,
            autoscale=self.autoscale,
            autoscale_keepalive_s=self.autoscale_keepalive_s,
            max_result_bytes=self.max_result_bytes,
            max_hung_threads=self.max_hung_threads,
        )


def _serve_metrics(asked: WorkerFlags, runner: Worker, dsn: str) -> MetricsServer | None:
    """``--metrics-port``: this worker's series, ``/healthz``, and ``/readyz`` (ready while the
    worker runs, is not shutting down, and its database answers)."""
    if asked.metrics_port is None:
        return None

    def ready() -> tuple[bool, dict[str, object]]:
        if runner.stopping:
            return False, {"worker": "shutting down"}
        database = health.database_reachable(dsn)
        return database.ok, {"worker": runner.id, "database": database.detail}

    exporter = MetricsServer(
        metrics.REGISTRY, port=asked.metrics_port, address=asked.metrics_address, ready=ready
    )
    exporter.start()
    logs.say(f"metrics: http://{asked.metrics_address}:{exporter.port}/metrics")
    return exporter


def _with_app_settings(config: WorkerConfig, asked: WorkerFlags, app: LoadedApp) -> WorkerConfig:
    """The app's own worker settings (a Celery app's worker_concurrency, worker_pool ...) where
    no flag was given. Per-child limits set by the app apply to the process pool; the thread pool runs
    without them (as Celery's does), saying so."""
    from_app = app.worker_settings()
    chosen = app.worker_pool()
    solo = False
    if asked.pool is None and chosen is not None:  # -P wins over the app's worker_pool
        mapped, forced = flags.pool(chosen, asked.concurrency)
        config = dataclasses.replace(config, pool=mapped)
        solo = forced is not None and asked.concurrency is None
    for key in ("max_tasks_per_child", "max_memory_per_child"):
        if key not in from_app or getattr(asked, key) is not None:
            continue
        if config.pool != "processes":
            log.warning(
                "ujobs.worker: the app's worker_%s=%s is per pool process; the %s pool "
                "runs bodies in this process, so it does not apply",
                key,
                from_app[key],
                config.pool,
            )
            continue
        if key == "max_tasks_per_child":
            config = dataclasses.replace(config, max_tasks_per_child=from_app[key])
        else:
            config = dataclasses.replace(config, max_memory_per_child_kib=from_app[key])
    if asked.concurrency is None and asked.autoscale is None and "concurrency" in from_app:
        config = dataclasses.replace(config, concurrency=from_app["concurrency"])
    unregistered = app.unregistered_dead_after_s()
    if unregistered is not None and config.unregistered_dead_after_s is None:
        config = dataclasses.replace(config, unregistered_dead_after_s=unregistered)
    if asked.prefetch_multiplier is None and "prefetch_multiplier" in from_app:
        config = dataclasses.replace(config, prefetch_multiplier=from_app["prefetch_multiplier"])
    if solo:  # worker_pool="solo": one body at a time, whatever worker_concurrency says
        if asked.autoscale is not None:
            raise ConfigError(
                "the Celery app's worker_pool='solo' runs one body at a time, but --autoscale "
                "was given",
                hint="drop --autoscale, or pass -P threads",
            )
        config = dataclasses.replace(config, concurrency=1)
    return config


def _without_excluded(
    config: WorkerConfig, excluded: tuple[str, ...], declared: list[str]
) -> WorkerConfig:
    """Celery's ``-X``: the consumed queues (``-Q``, else every declared one) minus these."""
    if not excluded:
        return config
    base = config.queues or tuple(sorted(set(declared)))
    kept = tuple(q for q in base if q not in excluded)
    if not kept:
        raise ConfigError(
            f"-X {','.join(excluded)} leaves no queue to consume (of {','.join(base)})",
            hint="exclude fewer queues, or name the ones to consume with -Q",
        )
    return dataclasses.replace(config, queues=kept)


def embedded_scheduler(app: LoadedApp, dsn: str) -> Scheduler:
    """``-B``: the scheduler ``ujobs-bridge scheduler -A`` runs (the app's periodic tasks, a
    Celery app's ``beat_schedule``, the retention sweep), leader-elected with every other
    scheduler of the database, in this process. The outbox relay is not embedded."""
    # import cost: the scheduler command's module (rich, the relay) loads only with -B
    from ujobs_bridge._internal.cli.scheduler import load_tasks

    tasks = load_tasks(app, with_purge=True)
    try:
        return Scheduler(dsn, tasks, source=app.task_source())
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc


def serve(app: LoadedApp, app_spec: str | None, asked: WorkerFlags) -> NoReturn:
    """Run the worker for ``app`` until SIGTERM/SIGINT, then shut down and exit 0. Shared by
    ``ujobs-bridge worker`` and ``celery worker`` on a celery_compat app; a bad setting is a
    usage error (exit 2)."""
    try:
        app.apply_time_limits(asked.time_limit, asked.soft_time_limit)  # before jobs are read
        jobs = loading.jobs_of(app)
        if asked.task_events and not app.sends_events():
            raise ConfigError(
                f"-E: -A {app.spec} is not a Celery app, and task events are Celery's",
                hint="drop -E; follow jobs with `ujobs-bridge jobs ls` / `jobs stats`",
            )
        config = _with_app_settings(asked.config(), asked, app)
        config = _without_excluded(config, asked.exclude_queues, [d.queue for d in jobs.values()])
        flags.write_pidfile(asked.pidfile)
    except (ConfigError, OSError) as exc:
        message = exc.render() if isinstance(exc, ConfigError) else str(exc)
        raise click.UsageError(message) from exc
    resolved = database(asked.dsn, config_dsn=app.database_url(), app_spec=app_spec)
    ensure_schema(resolved)
    app.bind(resolved.dsn)
    beat = embedded_scheduler(app, resolved.dsn) if asked.beat else None
    node = flags.node_name(asked.nodename, prefix=app.node_prefix())
    worker_id = f"{node}:{os.getpid()}" if asked.nodename else None
    runner = Worker(
        resolved.dsn,
        jobs,
        config,
        app_spec=app_spec,
        channels=app.channels(),
        worker_id=worker_id,
        node_name=node,
        control=app.control_commands(),
        control_encode=app.control_encode,
    )
    stop_requested = threading.Event()
    hurry = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        try:  # told first, as Celery's handler sends worker_shutting_down before acting
            app.on_worker_stopping(runner, signum, stop_requested.is_set())
        finally:
            if stop_requested.is_set():
                hurry.set()
                runner.hurry()
            stop_requested.set()
            runner.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options = {k: v for k, v in click.get_current_context().params.items() if k != "dsn"}
    if asked.nodename:
        options["hostname"] = node  # expanded (%h ...), as Celery passes it on
    app.on_worker_init(runner, options)
    runner.start()
    if beat is not None:
        beat.start()
    exporter = _serve_metrics(asked, runner, resolved.dsn)
    node_part = f" node={runner.node}"
    size = (
        f"autoscale={config.autoscale[0]},{config.autoscale[1]}"
        if config.autoscale is not None
        else f"concurrency={config.concurrency}"
    )
    extra = f" beat={len(beat.tasks)} task(s)" if beat is not None else ""
    logs.say(
        f"worker {runner.id} ready:{node_part} queues={','.join(runner.queues)} jobs={len(jobs)} "
        f"{size} prefetch={config.prefetch_multiplier} pool={config.pool}{extra}"
    )
    app.on_worker_ready(runner)
    while not stop_requested.wait(0.5) and not runner.failed.is_set():
        if runner.remote_shutdown.is_set():  # a `shutdown` command: drain as on SIGTERM
            break
    if runner.failure is not None:
        runner.failed.wait()  # the worker hands back what it holds, then stops
        logs.say(
            f"worker: {runner.failure}; handed back what it held, exiting {EXIT_FAILED} "
            f"({ErrorCode.WORKER_FAILED.value})",
            level="ERROR",
        )
    else:
        logs.say("worker: shutting down (signal again to hand back at once)")
    if beat is not None:
        beat.stop()  # its round in flight ends, then the lease is given back (another leads)
    runner.stop(timeout_s=0 if hurry.is_set() else None)
    if exporter is not None:
        exporter.stop()
    app.on_worker_shutdown(runner)
    c = runner.counts
    logs.say(
        f"worker stopped: done={c.done} retried={c.retried} dead={c.dead}"
        f" handed_back={c.handed_back} fenced={c.fenced} claims={c.claims}"
        f" empty_claims={c.empty_claims} hand_offs={c.hand_offs}"
    )
    flags.remove_pidfile(asked.pidfile)
    sys.stdout.flush()
    sys.stderr.flush()
    # bodies still running were handed back; do not wait for their threads
    os._exit(EXIT_FAILED if runner.failure is not None else 0)
