"""``rate_limit`` for celery_compat tasks, enforced across the whole fleet.

Why it exists: Celery's ``rate_limit="10/m"`` is a token bucket inside each worker process, so
ten workers run ten times the rate. Here the bucket is a row (``x_rate_limits``, one per task
name) that every worker takes tokens from in one row-locked statement: the limit holds for the
fleet, which is what people writing ``rate_limit`` usually mean. Like Celery's bucket, the
capacity is one token (no bursts). A task that finds no token is snoozed for the time one token
takes to refill: its row goes back to ``ready`` with a later ``run_at``, its attempt uncounted,
and its worker slot is free meanwhile. ``worker_disable_rate_limits=True`` turns it off, as in
Celery; ``task_default_rate_limit`` applies to tasks that set none. Both are read once, when a
worker loads the app's tasks (``RateConf``), as Celery's worker reads them at start; a task's
own ``rate_limit`` is read per message (remote control changes it).

What it is not: a concurrency limit (how many run at once) or a per-worker limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery.utils.time import rate as parse_rate

from celery_compat.db import rate_limits
from ujobs_bridge.ext.jobs import JobContext, Snooze

CAPACITY = 1.0


@dataclass(frozen=True, slots=True)
class RateConf:
    """The app's rate-limit settings, read once when a worker loads its tasks (as Celery's
    worker reads ``worker_disable_rate_limits`` at start): each read of Celery's ``app.conf``
    walks its layered mappings, which a worker must not pay per message."""

    disabled: bool
    default: Any


def rate_conf(app: Any) -> RateConf:
    return RateConf(bool(app.conf.worker_disable_rate_limits), app.conf.task_default_rate_limit)


def per_second(app: Any, task: Any, conf: RateConf | None = None) -> float:
    """The task's rate in tasks per second; 0 means unlimited. ``conf``: the app's settings as
    ``rate_conf`` read them (else read now). The task's own ``rate_limit`` is read each time:
    the ``rate_limit`` remote-control command changes it on a running worker."""
    conf = rate_conf(app) if conf is None else conf
    if conf.disabled:
        return 0.0
    limit = getattr(task, "rate_limit", None) or conf.default
    return float(parse_rate(limit)) if limit else 0.0


def take(conn: Any, key: str, rate: float, now: Any) -> bool:
    """Spend one token of ``key``'s bucket; False when the bucket is empty."""
    return rate_limits.take(conn, rate_limits.TokenTake(key, rate, CAPACITY, now))


def take_or_snooze(app: Any, task: Any, ctx: JobContext, conf: RateConf | None = None) -> None:
    """Return when the task may run now; otherwise raise ``Snooze`` until a token refills."""
    rate = per_second(app, task, conf)
    if rate <= 0:
        return
    now = ctx.clock.sql_now()
    if ctx.database is not None:
        with ctx.connection() as conn:
            allowed = take(conn, task.name, rate, now)
    else:
        with app.ujobs_client.pool.connection() as conn:
            allowed = take(conn, task.name, rate, now)
    if not allowed:
        raise Snooze(1.0 / rate)
