"""A Celery app's ``worker_*`` settings under the bridge worker: each honoured, noted or refused.

Why it exists: a Celery app carries its worker configuration in ``app.conf`` (often from Django
settings), and a deploy moved to ``ujobs-bridge worker -A proj`` must not drop any of it
silently. Every Celery worker setting the app sets away from Celery's default falls in one of
three sets here:

- honoured, with Celery's meaning: ``worker_concurrency``, ``worker_prefetch_multiplier``,
  ``worker_max_tasks_per_child``, ``worker_max_memory_per_child`` (``sizes``),
  ``worker_pool`` (``pool``: prefork is the process pool), and, read where they act,
  ``worker_disable_rate_limits``, ``worker_send_task_events``, ``worker_log_format``,
  ``worker_task_log_format``;
- noted: no effect on the bridge, for a stated reason, said once at start as a warning;
- refused: the app relies on something the bridge cannot give (a custom consumer, timer or
  autoscaler class, worker direct queues): the worker does not start, and the error says what
  to do instead.

What it is not: the worker's flags (``ujobs_bridge/cli/worker_flags.py``; a flag wins over a
setting) or Celery's setting names before 4.0 (``CELERYD_*``), which are not read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ujobs_bridge.errors import ConfigError

log = logging.getLogger("ujobs.worker")

# A message whose task name no live bridge worker consuming its queue has registered is settled
# as Celery's worker settles an unknown task: FAILURE ``NotRegistered`` (the backend reads the
# dead row so), once due this long; a worker that has the task, consuming the queue, keeps it
# waiting for itself (presence).
UNKNOWN_TASK_FAILS_AFTER_S = 0.0

# Read where they act (rate_limit.py, the -E switch, worker_signals.setup_logging)
READ_ELSEWHERE = frozenset(
    {
        "worker_disable_rate_limits",
        "worker_send_task_events",
        "worker_log_format",
        "worker_task_log_format",
    }
)
SIZES: Mapping[str, str] = {
    "worker_concurrency": "concurrency",
    "worker_prefetch_multiplier": "prefetch_multiplier",
    "worker_max_tasks_per_child": "max_tasks_per_child",
    "worker_max_memory_per_child": "max_memory_per_child",
}
# Celery's pool modules (celery.concurrency.<module>) whose name is not the -P name
POOL_MODULES: Mapping[str, str] = {"thread": "threads"}
# setting -> why it has no effect here
NOTED: Mapping[str, str] = {
    "worker_redirect_stdouts_level": "a body's print() goes to the worker's stdout as it is",
    "worker_log_color": "log lines are plain text or JSON (--log-format)",
    "worker_log_datefmt": "log lines carry the logging module's default time format",
    "worker_task_log_datefmt": "log lines carry the logging module's default time format",
    "worker_lost_wait": "a job whose pool process died fails at once (UJ_WORKER_LOST)",
    "worker_proc_alive_timeout": "the process pool's children are watched by the worker itself",
    "worker_pool_putlocks": "the pool takes a job only into a free slot",
    "worker_pool_restarts": "pool_restart is not a remote-control command here; restart the worker",
    "worker_pool_start_method": "the process pool forks its children",
    "worker_timer_precision": "ETA and countdown wait in Postgres (run_at), not in a timer",
    "worker_eta_task_limit": "ETA and countdown wait in Postgres (run_at), not in worker memory",
    "worker_enable_prefetch_count_reduction": "claims are sized by free slots, not by a "
    "broker prefetch count",
    "worker_disable_prefetch": "claims are sized by free slots, not by a broker prefetch count",
    "worker_detect_quorum_queues": "there are no broker queues to detect",
    "worker_cancel_long_running_tasks_on_connection_loss": "a body keeps running while the "
    "database is away, and its outcome is written when it is back (its lease holds it)",
    "worker_soft_shutdown_timeout": "shutdown waits --shutdown-timeout for running bodies, then "
    "hands the rest back uncounted",
    "worker_enable_soft_shutdown_on_idle": "shutdown waits --shutdown-timeout for running bodies, "
    "then hands the rest back uncounted",
    "worker_state_db": "revoked task ids are kept in Postgres, for every worker and restart",
    "worker_deduplicate_successful_tasks": "a job that succeeded is never run again, and "
    "transport duplicates are absorbed by their send key",
    "worker_enable_remote_control": "inspect and control through Postgres are answered "
    "regardless; False only keeps the worker off a cutover broker's mailbox",
}
# setting -> (why it cannot be honoured, what to do instead)
REFUSED: Mapping[str, tuple[str, str]] = {
    "worker_autoscaler": (
        "a custom autoscaler class cannot drive the bridge's pool",
        "drop worker_autoscaler and use --autoscale MAX,MIN (the built-in autoscaler)",
    ),
    "worker_consumer": (
        "the bridge worker claims jobs from Postgres; a custom broker consumer class has no "
        "messages to consume",
        "drop worker_consumer; move its logic into a worker_init or worker_ready receiver",
    ),
    "worker_timer": (
        "ETA and countdown wait in Postgres (run_at); there is no timer class to replace",
        "drop worker_timer",
    ),
    "worker_agent": (
        "a custom worker agent (cell actor) has no broker to talk over",
        "drop worker_agent",
    ),
    "worker_direct": (
        "worker direct queues (node.dq2) are broker routing; a task here runs on any worker "
        "of its queue",
        "give the worker a queue of its own with -Q and route the task there",
    ),
}


def explicit(app: Any) -> dict[str, Any]:
    """The ``worker_*`` settings the app itself set, with their values: assigned on
    ``app.conf``, or read from its configuration (``config_from_object``, Django's ``CELERY_``
    namespace) with a value other than Celery's default."""
    conf = app.conf
    conf.get("worker_pool")  # reading finalizes a pending configuration: its maps are then known
    maps = getattr(conf, "maps", None)
    if not maps:
        return {}
    builtin = maps[-1]
    out: dict[str, Any] = {}
    for key in builtin:
        if not (isinstance(key, str) and key.startswith("worker_")):
            continue
        value = conf.get(key)
        if key in maps[0] or value != builtin.get(key):
            out[key] = value
    return out


def review(app: Any) -> None:
    """At worker start: refuse a setting the bridge cannot honour (``ConfigError`` naming it and
    the fix), and warn once about each one that has no effect here, saying why. A setting left at
    Celery's default says nothing."""
    conf = app.conf
    builtin = conf.maps[-1] if getattr(conf, "maps", None) else {}
    for key, value in sorted(explicit(app).items()):
        if value == builtin.get(key):
            continue
        if key in REFUSED:
            why, instead = REFUSED[key]
            raise ConfigError(
                f"the Celery app's {key}={value!r} is not supported: {why}", hint=instead
            )
        if key in NOTED:
            log.warning(
                "ujobs.worker: the Celery app's %s=%r has no effect here: %s",
                key,
                value,
                NOTED[key],
            )


def sizes(app: Any) -> dict[str, int]:
    """The worker sizes the app set: ``worker_concurrency`` (→ ``concurrency``),
    ``worker_prefetch_multiplier`` (→ ``prefetch_multiplier``), ``worker_max_tasks_per_child``
    and ``worker_max_memory_per_child`` (→ ``max_tasks_per_child`` / ``max_memory_per_child``),
    each only when the app sets it (Celery's own defaults, CPU count and 4, do not override the
    bridge's)."""
    conf = app.conf
    builtin = conf.maps[-1] if getattr(conf, "maps", None) else {}
    chosen = explicit(app)
    out: dict[str, int] = {}
    for key, name in SIZES.items():
        value = conf.get(key)
        if value is None or (key not in chosen and value == builtin.get(key)):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"the Celery app's {key}={value!r} is not a positive integer",
                hint=f"set {key} to a whole number of at least 1, or pass the worker flag",
            )
        out[name] = value
    return out


def pool_name(value: Any) -> str:
    """A pool as Celery names it (``-P``, ``worker_pool``): a name, a class path
    (``celery.concurrency.thread:TaskPool``) or a pool class, as its ``-P`` name; a custom
    class keeps its module's name, which the worker's pool check refuses with the choices."""
    if isinstance(value, str) and ":" not in value and "." not in value:
        return value
    module = value.split(":", 1)[0] if isinstance(value, str) else value.__module__ or ""
    name = str(module).rsplit(".", 1)[-1]
    return POOL_MODULES.get(name, name)


def pool(app: Any) -> str | None:
    """The ``-P`` name of the pool the app chose (``worker_pool``), when it set one."""
    value = explicit(app).get("worker_pool")
    return pool_name(value) if value else None
