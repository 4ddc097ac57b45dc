"""``ujobs-bridge scheduler -A MODULE`` and ``ujobs-bridge tasks ls``.

Why it exists: the scheduler is the process that replaces ``celery beat``; run as many as you
like, one leads. It also relays the transactional outbox of its database. SIGTERM finishes the
round and the relay batch in flight, gives the lease back, and exits 0. ``tasks ls`` shows each
task's schedule, policy, next fire time and last occurrence.

``serve`` is also what ``celery -A proj beat`` runs on a celery_compat app
(``celery_compat/beat_service.py``).

What it is not: the scheduler itself (``scheduler.py``).
"""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime
from types import FrameType

import click

from ujobs_bridge._internal.cli.options import (
    CLI_ROLE,
    app_option,
    database,
    dsn_option,
    json_option,
    log_format_option,
    metrics_options,
    pgbouncer_option,
    print_json,
)
from ujobs_bridge._internal.cli.output import cell, console, table
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.config.schema_access import ensure_schema
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db.scheduling import last_fires, watermarks
from ujobs_bridge._internal.observe import health, logs, metrics
from ujobs_bridge._internal.observe.logs import LogFormat
from ujobs_bridge._internal.observe.metrics_http import MetricsServer
from ujobs_bridge._internal.outbox.relay import OutboxRelay
from ujobs_bridge._internal.scheduling.scheduler import (
    DEFAULT_INTERVAL_S,
    DEFAULT_TTL_S,
    Scheduler,
    purge_task,
)
from ujobs_bridge._internal.scheduling.task import PeriodicTask
from ujobs_bridge.errors import ConfigError


def resolve_app(app_spec: str | None) -> loading.LoadedApp | None:
    """``-A`` read by the loaders; a usage error (naming what was tried) when it holds no app."""
    if app_spec is None:
        return None
    try:
        return loading.resolve(app_spec)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc


def load_tasks(app: loading.LoadedApp | None, *, with_purge: bool) -> dict[str, PeriodicTask]:
    """The app's periodic tasks (plus the purge unless asked not to). A plain module (no loader
    claimed it) holding neither task()s nor jobs is refused: ``-A`` named the wrong thing."""
    found: dict[str, PeriodicTask] = {}
    if app is not None:
        try:
            found = app.periodic_tasks()
            if not found and type(app) is loading.LoadedApp and not app.jobs():
                raise loading.not_found(app.spec, app.target, "periodic tasks and no app")
        except ConfigError as exc:
            raise click.UsageError(exc.render()) from exc
    if with_purge:
        builtin = purge_task()
        found.setdefault(builtin.name, builtin)
    return found


@click.command()
@app_option("Where the task()s or the Celery app are declared; its database is used.")
@click.option(
    "--interval",
    "interval_s",
    default=DEFAULT_INTERVAL_S,
    type=float,
    show_default=True,
    help="Seconds between rounds.",
)
@click.option(
    "--lease",
    "ttl_s",
    default=DEFAULT_TTL_S,
    type=float,
    show_default=True,
    help="Leader lease seconds.",
)
@click.option(
    "--purge/--no-purge",
    default=True,
    show_default=True,
    help="Fire the built-in hourly retention sweep.",
)
@click.option(
    "--outbox/--no-outbox", default=True, show_default=True, help="Relay this database's outbox."
)
@click.option(
    "--loglevel",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@pgbouncer_option
@log_format_option
@metrics_options
@dsn_option
def scheduler(
    app_spec: str | None,
    interval_s: float,
    ttl_s: float,
    purge: bool,
    outbox: bool,
    loglevel: str,
    log_format: LogFormat,
    metrics_port: int | None,
    metrics_address: str,
    dsn: str | None,
) -> None:
    """Fire periodic tasks (leader-elected; run several) and relay the outbox."""
    logs.setup(loglevel.upper(), log_format)
    serve(
        resolve_app(app_spec),
        interval_s=interval_s,
        ttl_s=ttl_s,
        purge=purge,
        outbox=outbox,
        dsn=dsn,
        metrics_port=metrics_port,
        metrics_address=metrics_address,
    )


def serve(
    app: loading.LoadedApp | None,
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    ttl_s: float = DEFAULT_TTL_S,
    purge: bool = True,
    outbox: bool = True,
    dsn: str | None = None,
    metrics_port: int | None = None,
    metrics_address: str = "127.0.0.1",
) -> None:
    """Run the scheduler (and the relay) for ``app`` until SIGTERM/SIGINT. Shared by
    ``ujobs-bridge scheduler`` and ``celery beat`` on a celery_compat app."""
    tasks = load_tasks(app, with_purge=purge)
    resolved = database(
        dsn,
        config_dsn=app.database_url() if app is not None else None,
        app_spec=app.spec if app is not None else None,
    )
    if app is not None:
        app.bind(resolved.dsn)
    ensure_schema(resolved)
    try:
        runner = Scheduler(
            resolved.dsn,
            tasks,
            ttl_s=ttl_s,
            interval_s=interval_s,
            source=app.task_source() if app is not None else None,
        )
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    # The relay shares the scheduler's connection: the process holds one at rest.
    relay = OutboxRelay(resolved.dsn, connection=runner.connection) if outbox else None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        runner.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    runner.start()
    if relay is not None:
        relay.start()
    exporter = None
    if metrics_port is not None:

        def ready() -> tuple[bool, dict[str, object]]:
            """Ready while it runs and its database answers; says whether it leads (a
            follower is ready: it takes over when the leader goes)."""
            if stop.is_set():
                return False, {"scheduler": "shutting down"}
            database = health.database_reachable(resolved.dsn)
            return database.ok, {
                "scheduler": runner.holder,
                "leader": runner.leader.is_leader,
                "database": database.detail,
            }

        exporter = MetricsServer(
            metrics.REGISTRY, port=metrics_port, address=metrics_address, ready=ready
        )
        exporter.start()
        logs.say(f"metrics: http://{metrics_address}:{exporter.port}/metrics")
    logs.say(f"scheduler {runner.holder} ready: {len(tasks)} task(s)")
    while not stop.wait(0.5):
        pass
    if relay is not None:
        relay.stop()  # first: the runner's stop closes the connection they share
    runner.stop()
    if exporter is not None:
        exporter.stop()
    c = runner.counts
    logs.say(
        f"scheduler stopped: rounds={c.rounds} fired={c.fired} jobs={c.jobs} "
        f"beat_sends={c.sends} catch_ups={c.catch_ups} duplicates={c.duplicates}"
    )


@click.group()
def tasks() -> None:
    """Inspect periodic tasks."""


@tasks.command("ls")
@app_option("Where the task()s or the Celery app are declared; its database is read.")
@click.option("--purge/--no-purge", default=True)
@dsn_option
@json_option
def ls(app_spec: str | None, purge: bool, dsn: str | None, as_json: bool) -> None:
    """Each task's schedule, policy, next fire time and last occurrence."""
    app = resolve_app(app_spec)
    found = load_tasks(app, with_purge=purge)
    resolved = database(
        dsn, quiet=as_json, config_dsn=app.database_url() if app is not None else None
    )
    with connections.connect(resolved.dsn, CLI_ROLE) as conn:
        last = last_fires(conn)
        marks = watermarks(conn)
    now = datetime.now(UTC)
    rows: list[dict[str, str | int | bool | None]] = []
    for name, periodic in sorted(found.items()):
        fired = last.get(name)
        mark = marks.get(name)
        rows.append(
            {
                "name": name,
                "schedule": periodic.schedule.describe(),
                "policy": periodic.catch_up,
                "max_catch_up": periodic.max_catch_up,
                "next": periodic.schedule.next_after(now).isoformat(),
                "last_occurrence": fired[0].isoformat() if fired else None,
                "last_was_catch_up": fired[1] if fired else None,
                "last_fired_at": fired[2].isoformat() if fired else None,
                "watermark": mark.isoformat() if mark else None,
            }
        )
    if as_json:
        print_json(rows)
        return
    tasks_table = table(
        f"{len(rows)} task(s)", ("name", "schedule", "policy", "next", "last occurrence")
    )
    for r in rows:
        cells = [cell(str(r[k])) for k in ("name", "schedule", "policy", "next")]
        last_text = "never"
        if r["last_occurrence"]:
            last_text = str(r["last_occurrence"]) + (
                " (catch-up)" if r["last_was_catch_up"] else ""
            )
        tasks_table.add_row(*cells, cell(last_text))
    console().print(tasks_table)
