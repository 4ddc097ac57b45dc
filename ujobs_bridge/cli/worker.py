"""``ujobs-bridge worker``: run jobs from the queues named with ``-Q``.

Why it exists: it is the process operators deploy. It upgrades the schema, loads the jobs from
``-A`` (never from data), starts a ``Worker`` and turns SIGTERM/SIGINT into the two-phase drain:
stop claiming at once, wait for bodies up to ``--shutdown-timeout``, hand back the rest with
their attempt uncounted, exit 0. A second signal cuts the wait short.

What it is not: the worker (``ujobs_bridge.worker``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
from types import FrameType

import click

from .. import loading, validation
from ..db import schema
from ..errors import ConfigError
from ..worker.config import (
    DEFAULT_CONCURRENCY,
    DEFAULT_LEASE_S,
    DEFAULT_POLL_S,
    DEFAULT_PREFETCH_MULTIPLIER,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    POOLS,
    WorkerConfig,
)
from ..worker.loop import Worker
from .options import database, dsn_option


@click.command()
@click.option(
    "-A",
    "--app",
    "app_spec",
    required=True,
    metavar="MODULE[:ATTR]",
    help="Where the jobs are declared.",
)
@click.option(
    "-Q",
    "--queues",
    default=None,
    metavar="Q1,Q2",
    help="Queues to consume. Default: every queue a loaded job declares.",
)
@click.option(
    "-c",
    "--concurrency",
    default=None,
    type=int,
    help=f"Bodies running at once. Default: a Celery app's worker_concurrency, else {DEFAULT_CONCURRENCY}.",
)
@click.option(
    "--pool", default="threads", show_default=True, help=f"Where bodies run: {', '.join(POOLS)}."
)
@click.option(
    "--prefetch-multiplier",
    default=None,
    type=int,
    help="Jobs held per slot (claimed ahead, leased). Default: a Celery app's "
    f"worker_prefetch_multiplier, else {DEFAULT_PREFETCH_MULTIPLIER}.",
)
@click.option(
    "--lease",
    "lease_s",
    default=DEFAULT_LEASE_S,
    type=float,
    show_default=True,
    help="Lease seconds; renewed every lease/3.",
)
@click.option(
    "--poll",
    "poll_s",
    default=DEFAULT_POLL_S,
    type=float,
    show_default=True,
    help="Seconds between polls when no notification arrives.",
)
@click.option(
    "--shutdown-timeout",
    "shutdown_s",
    default=DEFAULT_SHUTDOWN_TIMEOUT_S,
    type=float,
    show_default=True,
    help="Seconds SIGTERM waits for running bodies before handing them back.",
)
@click.option(
    "--loglevel",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@dsn_option
def worker(
    app_spec: str,
    queues: str | None,
    concurrency: int | None,
    pool: str,
    prefetch_multiplier: int | None,
    lease_s: float,
    poll_s: float,
    shutdown_s: float,
    loglevel: str,
    dsn: str | None,
) -> None:
    """Run jobs. SIGTERM drains: no new claims, running bodies finish or are handed back."""
    logging.basicConfig(
        level=loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:  # the flags are checked before -A is imported
        config = WorkerConfig(
            queues=tuple(validation.queue_list(queues)) if queues is not None else None,
            concurrency=DEFAULT_CONCURRENCY if concurrency is None else concurrency,
            pool=pool,
            prefetch_multiplier=DEFAULT_PREFETCH_MULTIPLIER
            if prefetch_multiplier is None
            else prefetch_multiplier,
            lease_s=lease_s,
            poll_s=poll_s,
            shutdown_timeout_s=shutdown_s,
        )
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    app = loading.resolve(app_spec)
    jobs = loading.jobs_of(app)
    try:  # the app's own worker settings (a Celery app's worker_concurrency ...), where no flag was given
        from_app = app.worker_settings()
        if concurrency is None and "concurrency" in from_app:
            config = dataclasses.replace(config, concurrency=from_app["concurrency"])
        if prefetch_multiplier is None and "prefetch_multiplier" in from_app:
            config = dataclasses.replace(
                config, prefetch_multiplier=from_app["prefetch_multiplier"]
            )
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    resolved = database(dsn, config_dsn=app.database_url())
    schema.upgrade(resolved.dsn)
    app.bind(resolved.dsn)
    runner = Worker(resolved.dsn, jobs, config, app_spec=app_spec, channels=app.channels())
    stop_requested = threading.Event()
    hurry = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop_requested.is_set():
            hurry.set()
            runner.hurry()
        stop_requested.set()
        runner.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options = {k: v for k, v in click.get_current_context().params.items() if k != "dsn"}
    app.on_worker_init(runner, options)
    runner.start()
    click.echo(
        f"worker {runner.id} ready: queues={','.join(runner.queues)} jobs={len(jobs)} "
        f"concurrency={config.concurrency} prefetch={config.prefetch_multiplier} pool={config.pool}",
        err=True,
    )
    app.on_worker_ready(runner)
    while not stop_requested.wait(0.5):
        pass
    click.echo("worker: shutting down (signal again to hand back at once)", err=True)
    runner.stop(timeout_s=0 if hurry.is_set() else None)
    app.on_worker_shutdown(runner)
    c = runner.counts
    click.echo(
        f"worker stopped: done={c.done} retried={c.retried} dead={c.dead} handed_back={c.handed_back} fenced={c.fenced}",
        err=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # bodies still running were handed back; do not wait for their threads
