"""``ujobs-bridge worker``: run jobs from the queues named with ``-Q``.

Why it exists: it is the process operators deploy. This module is the command: its flags, with
Celery's worker flags accepted in their Celery meaning (``worker_flags.py``), checked before
``-A`` is imported and assembled into ``WorkerFlags``. Running the worker until a signal (the
two-phase drain, the exit codes, ``-B``'s embedded scheduler) is ``worker_serve.serve``, which
``celery -A proj worker`` on a celery_compat app runs too (``celery_compat/worker.py``).

What it is not: the running of a worker (``worker_serve.py``) or the worker
(``ujobs_bridge._internal.worker``).
"""

from __future__ import annotations

import click

from ujobs_bridge._internal.cli import worker_flags as flags
from ujobs_bridge._internal.cli.options import (
    dsn_option,
    listen_dsn_option,
    log_format_option,
    metrics_options,
    pgbouncer_option,
)
from ujobs_bridge._internal.cli.worker_serve import WorkerFlags, serve
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.jobs.payload import DEFAULT_MAX_RESULT_BYTES
from ujobs_bridge._internal.observe.logs import LogFormat
from ujobs_bridge._internal.worker.config import (
    DEFAULT_CONCURRENCY,
    DEFAULT_LEASE_S,
    DEFAULT_POLL_S,
    DEFAULT_PREFETCH_MULTIPLIER,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
)
from ujobs_bridge.errors import ConfigError


def _queues(value: str | None) -> tuple[str, ...] | None:
    return tuple(validation.queue_list(value)) if value else None


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
    "-X",
    "--exclude-queues",
    default=None,
    metavar="Q1,Q2",
    help="Queues not to consume (Celery's -X), taken out of -Q or the default.",
)
@click.option(
    "-c",
    "--concurrency",
    default=None,
    type=int,
    help=f"Bodies running at once. Default: a Celery app's worker_concurrency, else {DEFAULT_CONCURRENCY}.",
)
@click.option(
    "-P",
    "--pool",
    default=None,
    metavar="|".join(flags.POOL_MAP),
    help="Where bodies run. prefork is processes; solo is threads with -c 1; "
    "eventlet/gevent are refused. Default: a Celery app's worker_pool, else threads.",
)
@click.option(
    "-O",
    "--optimization",
    type=click.Choice(["default", "fair"]),
    default=None,
    help="Accepted for Celery compatibility: the bridge always schedules fairly "
    "(a free slot takes the next due job; nothing is reserved behind a busy one).",
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
    "-l",
    "--loglevel",
    default="INFO",
    show_default=True,
    type=click.Choice(list(flags.LOG_LEVELS), case_sensitive=False),
)
@click.option(
    "-n",
    "--hostname",
    default=None,
    metavar="NAME@HOST",
    help="Node name, as Celery's -n: %h host, %n its first label, %d domain. "
    "Default: ujobs@<host> (a Celery app's worker: celery@<host>).",
)
@click.option(
    "--pidfile", default=None, help="Write the pid here; refused while it names a live process."
)
@click.option("-f", "--logfile", default=None, help="Log to this file instead of stderr.")
@log_format_option
@metrics_options
@click.option(
    "--without-heartbeat", is_flag=True, help="No-op: worker liveness is the lease heartbeat."
)
@click.option(
    "--without-gossip", is_flag=True, help="No-op: workers do not gossip; they share Postgres."
)
@click.option(
    "--without-mingle", is_flag=True, help="No-op: revokes are durable rows; nothing to sync."
)
@click.option(
    "-E",
    "--task-events",
    "--events",
    "task_events",
    is_flag=True,
    help="Send Celery's task and worker events (a Celery app: to Postgres, and to its broker "
    "during a cutover, where Flower reads them).",
)
@click.option(
    "--max-tasks-per-child",
    type=int,
    default=None,
    help="Replace a pool child after it ran N bodies (the last one finishes first). "
    "Process pool only.",
)
@click.option(
    "--max-memory-per-child",
    type=int,
    default=None,
    metavar="KIB",
    help="Replace a pool child whose resident memory exceeds KIB after a body (the body "
    "finishes first). Process pool only.",
)
@click.option(
    "--time-limit",
    type=float,
    default=None,
    help="Hard time limit (seconds) for jobs/tasks that set none: an @job's timeout=, a "
    "Celery app's task_time_limit.",
)
@click.option(
    "--soft-time-limit",
    type=float,
    default=None,
    help="Soft time limit (seconds) for Celery tasks that set none (task_soft_time_limit): "
    "SoftTimeLimitExceeded is raised in the body. Celery apps only.",
)
@click.option(
    "--max-result-bytes",
    type=int,
    default=DEFAULT_MAX_RESULT_BYTES,
    show_default=True,
    help="Largest result (its JSON, in bytes) a job or Celery task may return; a larger one "
    "fails its job (UJ_OUTPUT_TOO_LARGE) without being stored.",
)
@click.option(
    "--max-hung-threads",
    type=int,
    default=None,
    help="Thread bodies hung past their timeout whose threads are abandoned (each slot goes to "
    "a new thread); one more and the worker hands back its jobs and exits 70. Default: twice "
    "the concurrency.",
)
@click.option(
    "--autoscale",
    default=None,
    metavar="MAX,MIN",
    help="Grow the pool toward MAX while jobs wait, shrink toward MIN when idle "
    "(AUTOSCALE_KEEPALIVE seconds, default 30). Replaces -c.",
)
@click.option(
    "-B",
    "--beat",
    is_flag=True,
    help="Also run the scheduler in this process (leader-elected: several -B workers still "
    "fire each occurrence once); it stops with the worker.",
)
@pgbouncer_option
@listen_dsn_option
@dsn_option
def worker(
    app_spec: str,
    queues: str | None,
    exclude_queues: str | None,
    concurrency: int | None,
    pool: str | None,
    optimization: str | None,
    prefetch_multiplier: int | None,
    lease_s: float,
    poll_s: float,
    shutdown_s: float,
    loglevel: str,
    hostname: str | None,
    pidfile: str | None,
    logfile: str | None,
    log_format: LogFormat,
    metrics_port: int | None,
    metrics_address: str,
    without_heartbeat: bool,
    without_gossip: bool,
    without_mingle: bool,
    task_events: bool,
    max_tasks_per_child: int | None,
    max_memory_per_child: int | None,
    time_limit: float | None,
    soft_time_limit: float | None,
    max_result_bytes: int,
    max_hung_threads: int | None,
    autoscale: str | None,
    beat: bool,
    dsn: str | None,
) -> None:
    """Run jobs. SIGTERM shuts down: no new claims, running bodies finish or are handed back."""
    try:  # the flags are checked before -A is imported
        mapped_pool, mapped_concurrency = (
            flags.pool(pool, concurrency) if pool is not None else (None, concurrency)
        )
        flags.node_name(hostname)  # an unknown %-format is refused before -A is imported
        asked = WorkerFlags(
            queues=_queues(queues),
            exclude_queues=_queues(exclude_queues) or (),
            concurrency=mapped_concurrency,
            pool=mapped_pool,
            prefetch_multiplier=prefetch_multiplier,
            lease_s=lease_s,
            poll_s=poll_s,
            shutdown_s=shutdown_s,
            loglevel=flags.log_level(loglevel),
            nodename=hostname,  # serve expands it with the app's node prefix
            pidfile=pidfile,
            logfile=logfile,
            dsn=dsn,
            task_events=task_events,
            log_format=log_format,
            metrics_port=metrics_port,
            metrics_address=metrics_address,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child=max_memory_per_child,
            max_result_bytes=max_result_bytes,
            max_hung_threads=max_hung_threads,
            autoscale=flags.autoscale(autoscale) if autoscale is not None else None,
            autoscale_keepalive_s=flags.autoscale_keepalive(),
            beat=beat,
        )
        asked.config()
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    flags.setup_logging(asked.loglevel, asked.logfile, asked.log_format)
    serve(loading.resolve(app_spec), app_spec, asked)
