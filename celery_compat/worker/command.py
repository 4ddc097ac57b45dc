"""``celery -A proj worker`` on a celery_compat app: runs the bridge worker, not a broker consumer.

Why it exists: deploy scripts say ``celery worker``. Celery's command builds ``app.Worker(...)``
(``celery/bin/worker.py``) and calls ``.start()``; a celery_compat app's ``Worker`` is this class
(``Celery.Worker``), which maps Celery's already-parsed flags (node name expanded, ``-P`` resolved
to a pool class, ``-l`` a level number) onto ``ujobs_bridge._internal.cli.worker_serve.WorkerFlags`` and runs
the same ``serve`` as ``ujobs-bridge worker``: until SIGTERM/SIGINT, then drain and exit 0.
A flag with no meaning on the bridge is refused (exit 2) with the reason, as there. Celery's
``--time-limit``/``--soft-time-limit`` set ``task_time_limit``/``task_soft_time_limit`` (the
default for tasks that set none) in the worker and in every ``-P prefork`` child;
``--max-tasks-per-child``, ``--max-memory-per-child``, ``--autoscale`` and ``-B`` (the bridge
scheduler, leader-elected) are the bridge worker's.

What it is not: Celery's ``WorkController``: no consumer, no broker connection, no bootsteps.
"""

from __future__ import annotations

import os
from typing import Any

import click

from celery_compat.control.names import NODE_PREFIX
from celery_compat.worker import settings as worker_settings
from celery_compat.worker.loading import CeleryApp
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.ext import cli as flags
from ujobs_bridge.ext.cli import WorkerFlags
from ujobs_bridge.ext.cli import serve_worker as serve

# Celery's Worker(**kwargs) keys that mean nothing once the worker is running here (the
# daemonizing ones are used by `celery worker --detach` before Worker is built; the others are
# console or event-channel details), so they are accepted as Celery accepts them.
ACCEPTED = frozenset(
    {
        "no_color",
        "quiet",
        "optimization",
        "without_gossip",
        "without_mingle",
        "without_heartbeat",
        "heartbeat_interval",
        "detach",
        "umask",
        "workdir",
        "executable",
        "uid",
        "gid",
        "statedb",  # revokes are durable rows in Postgres; nothing to persist per node
        "prefetch_multiplier",
        "concurrency",
        "queues",
        "exclude_queues",
        "include",
        "time_limit",
        "soft_time_limit",
        "max_tasks_per_child",
        "max_memory_per_child",
        "autoscale",
        "beat",
        "pool_start_method",
        "disable_prefetch",
        "schedule_filename",  # -B's shelve file: the schedule's state is rows in Postgres
        "scheduler",  # checked with -B (beat_scheduler_refusal)
        "task_events",  # -E: read by the app's worker hooks (worker_events.py)
    }
)
REFUSED = {
    "purge": "--purge",
}


def _autoscale(value: Any) -> tuple[int, int] | None:
    """Celery's parsed ``--autoscale`` (a ``(max, min)`` tuple) or its text form."""
    if not value:
        return None
    if isinstance(value, str):
        return flags.autoscale(value)
    most, least = value
    return int(most), int(least)


def _beat_scheduler_refusal(scheduler: Any) -> ConfigError | None:
    """``-B --scheduler CLASS``: the embedded scheduler is the bridge's; another class runs
    only under ``celery beat -S`` (Celery's beat, sending through the bridge)."""
    # import cost: beat's command loads only to judge -B --scheduler
    from celery_compat.beat.command import DEFAULT_SCHEDULER, _same_class

    if scheduler is None or (
        isinstance(scheduler, str) and _same_class(scheduler, DEFAULT_SCHEDULER)
    ):
        return None
    return ConfigError(
        f"-B --scheduler {scheduler}: the worker embeds the bridge scheduler, not a beat "
        "scheduler class",
        hint="drop --scheduler, or run `celery -A proj beat -S CLASS` as its own process",
    )


def _list(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(q).strip() for q in items if str(q).strip())


def _pool_name(pool_cls: Any) -> str:
    """``-P`` as Celery resolved it (from the flag or ``worker_pool``): a pool class or a name."""
    return "prefork" if pool_cls is None else worker_settings.pool_name(pool_cls)


def _app_spec() -> str | None:
    """The ``-A`` the ``celery`` command was given (pool children import the app from it)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    spec = ctx.find_root().params.get("app")
    return spec if isinstance(spec, str) else None


class Worker:
    """What ``app.Worker`` is on a celery_compat app (bound with ``subclass_with_self``)."""

    app: Any  # set by ``subclass_with_self``
    exitcode = 0

    def __init__(
        self,
        hostname: str | None = None,
        pool_cls: Any = None,
        loglevel: Any = None,
        logfile: str | None = None,
        pidfile: str | None = None,
        **kwargs: Any,
    ) -> None:
        pool_cls = kwargs.pop("pool", None) or pool_cls  # the command passes -P as ``pool``
        unknown = sorted(
            k for k, v in kwargs.items() if k not in ACCEPTED and k not in REFUSED and v
        )
        self.hostname = flags.node_name(hostname, prefix=NODE_PREFIX)
        try:
            for key, flag in REFUSED.items():
                if kwargs.get(key):
                    raise flags.refusal(flag)
            if unknown:
                raise ConfigError(
                    f"celery worker options {unknown} have no meaning on the bridge worker",
                    hint="drop them; `ujobs-bridge worker --help` lists what is supported",
                )
            concurrency = kwargs.get("concurrency")
            if kwargs.get("beat"):
                refused = _beat_scheduler_refusal(kwargs.get("scheduler"))
                if refused is not None:
                    raise refused
            pool, mapped_concurrency = flags.pool(
                _pool_name(pool_cls), int(concurrency) if concurrency else None
            )
            self.flags = WorkerFlags(
                queues=_list(kwargs.get("queues")) or None,
                exclude_queues=_list(kwargs.get("exclude_queues")),
                concurrency=mapped_concurrency,
                pool=pool,
                prefetch_multiplier=kwargs.get("prefetch_multiplier"),
                loglevel=flags.log_level(loglevel if loglevel is not None else "WARNING"),
                nodename=self.hostname,
                pidfile=pidfile,
                logfile=logfile,
                task_events=bool(kwargs.get("task_events")),
                # Celery's CLI has no --log-format: the bridge's environment variable sets it
                log_format="json" if os.environ.get("UJOBS_LOG_FORMAT") == "json" else "text",
                time_limit=kwargs.get("time_limit"),
                soft_time_limit=kwargs.get("soft_time_limit"),
                max_tasks_per_child=kwargs.get("max_tasks_per_child"),
                max_memory_per_child=kwargs.get("max_memory_per_child"),
                autoscale=_autoscale(kwargs.get("autoscale")),
                autoscale_keepalive_s=flags.autoscale_keepalive(),
                beat=bool(kwargs.get("beat")),
            )
            self.flags.config()
        except ConfigError as exc:
            raise click.UsageError(exc.render()) from exc
        self.include = _list(kwargs.get("include"))

    def start(self) -> None:
        app = self.app
        if self.include:
            app.conf.include = (*(app.conf.include or ()), *self.include)
        flags.setup_logging(self.flags.loglevel, self.flags.logfile, self.flags.log_format)
        app.loader.import_default_modules()
        spec = _app_spec()
        flags.say(f"celery worker on the bridge: {self.hostname} (tasks run from Postgres)")
        with flags.one_line_errors():  # as `ujobs-bridge worker` says it: one line, exit 1
            serve(CeleryApp(spec or app.main or "", app, app), spec, self.flags)
