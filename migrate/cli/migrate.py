"""``ujobs-bridge migrate``: move what waits in a Celery broker into ``x_jobs``; and its quarantine.

Why it exists: at cutover (or continuously with ``--follow`` while Celery and the bridge run side
by side) the backlog in Redis / RabbitMQ / any kombu broker must become job rows, each exactly
once, with nothing lost: ``migrate -A proj`` drains it (see ``migrate/`` for how), and
``migrate quarantine ls|show|retry|discard`` deals with what could not be moved. SIGTERM or
Ctrl-C finishes the batch in hand and exits 0 with the report.

What it is not: the drainer (``migrate/runner.py`` and the transports).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.text import Text

from migrate.appinfo import AppInfo
from migrate.cli.accept import accept_from, load_app
from migrate.cli.failure import check_broker_url, infrastructure_error, open_broker
from migrate.cli.quarantine import quarantine
from migrate.defaults import DEFAULT_BATCH, DEFAULT_MAX_BYTES, DEFAULT_POLL_S, PICKLE_WARNING
from migrate.outages import RideThrough
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.ext import database as connections
from ujobs_bridge.ext import loaders as loading
from ujobs_bridge.ext import observe
from ujobs_bridge.ext.cli import (
    CLI_ROLE,
    SaidLines,
    console,
    database,
    dsn_option,
    json_option,
    log_format_option,
    metrics_options,
    pgbouncer_option,
    print_json,
    say,
)
from ujobs_bridge.ext.database import ensure_schema
from ujobs_bridge.ext.jobs import queue_name
from ujobs_bridge.ext.observe import REGISTRY, MetricsServer, database_reachable

if TYPE_CHECKING:
    from migrate.batch import Context
    from migrate.report import Stats
    from migrate.source import Source


class Readiness:
    """``/readyz`` of ``migrate --metrics-port``: ready once draining (its database resolved),
    while it is not stopping and the database answers."""

    def __init__(self) -> None:
        self.dsn: str | None = None
        self.stop: threading.Event | None = None

    def check(self) -> tuple[bool, dict[str, object]]:
        if self.dsn is None or self.stop is None:
            return False, {"migrate": "starting"}
        if self.stop.is_set():
            return False, {"migrate": "stopping"}
        database = database_reachable(self.dsn)
        return database.ok, {"migrate": "draining", "database": database.detail}


@contextlib.contextmanager
def _restoring(previous: dict[signal.Signals, Any]) -> Iterator[None]:
    """Put back the signal handlers the drain replaced (the CLI can run inside a host process)."""
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _warn_unworkable_queues(queues: list[str], err: Console) -> None:
    for name in queues:
        try:
            queue_name(name)
        except ConfigError:
            err.print(
                f"note: queue {name!r} is not a valid bridge queue name: its rows are kept under "
                "that name, but `ujobs-bridge worker -Q` cannot name it; route the tasks to a "
                "queue with a plain name before running them on the bridge",
                highlight=False,
            )


def _queues(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [q.strip() for q in value.split(",") if q.strip()]


@click.group(invoke_without_command=True)
@click.option(
    "-A",
    "--app",
    "app_spec",
    default=None,
    metavar="MODULE[:ATTR]",
    help="The Celery app: its task names are the only ones accepted.",
)
@click.option(
    "--broker", default=None, metavar="URL", help="Broker to drain. Default: the app's broker_url."
)
@click.option(
    "-Q",
    "--queues",
    default=None,
    metavar="Q1,Q2",
    help="Queues to drain. Default: the app's queues.",
)
@click.option(
    "--all-queues",
    is_flag=True,
    help="Every queue the broker knows (Redis: kombu bindings; RabbitMQ: the management API).",
)
@click.option(
    "--management-url",
    default=None,
    metavar="URL",
    help="RabbitMQ --all-queues: the management API. Default: the broker's host, port 15672.",
)
@click.option(
    "--dry-run",
    "dry_run_flag",
    is_flag=True,
    help="Count and classify; change nothing (RabbitMQ: count per queue, read nothing).",
)
@click.option(
    "--follow", is_flag=True, help="Keep draining until SIGTERM, logging a line per batch."
)
@log_format_option
@metrics_options
@click.option("--limit", default=None, type=click.IntRange(min=1), help="Stop after N messages.")
@click.option(
    "--accept-content",
    default=None,
    metavar="json,msgpack,yaml",
    help="Serializers to decode. Default: the app's accept_content.",
)
@click.option(
    "--accept-pickle",
    is_flag=True,
    help="Also unpickle pickle bodies (trusts the broker with code execution).",
)
@click.option(
    "--restore-unacked",
    is_flag=True,
    help="Redis: also take kombu's `unacked` messages. ONLY with every Celery worker stopped.",
)
@click.option(
    "--max-bytes",
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    type=click.IntRange(min=1024),
    help="Largest message (and decompressed body) accepted.",
)
@click.option(
    "--batch",
    default=DEFAULT_BATCH,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Messages per transaction.",
)
@click.option(
    "--poll",
    "poll_s",
    default=DEFAULT_POLL_S,
    show_default=True,
    type=float,
    help="Seconds between polls of empty queues (--follow).",
)
@click.option(
    "--drainer-id",
    default=None,
    help="Names this drainer's Redis processing lists. Default: the host name.",
)
@pgbouncer_option
@dsn_option
@json_option
@click.pass_context
def migrate(
    ctx: click.Context,
    /,
    app_spec: str | None,
    broker: str | None,
    queues: str | None,
    all_queues: bool,
    **kwargs: Any,
) -> None:
    """Drain a Celery broker into x_jobs: each message exactly once, poison quarantined.

    Each batch is committed before the broker lets go of it (Redis: LMOVE to this drainer's
    processing list, LREM after commit; RabbitMQ and other kombu brokers: ack after commit).
    Messages already expired become rows the worker cancels at claim (REVOKED, never run).
    SIGTERM finishes the batch in hand and exits 0 with the report."""
    if ctx.invoked_subcommand is not None:
        return
    if not app_spec:
        raise click.UsageError("-A/--app is required to drain (it says which task names are known)")
    if queues is not None and all_queues:
        raise click.UsageError("-Q and --all-queues exclude each other")
    run_drain(app_spec, broker, _queues(queues), all_queues, **kwargs)


def run_drain(
    app_spec: str,
    broker: str | None,
    queues: list[str] | None,
    all_queues: bool,
    *,
    follow: bool,
    limit: int | None,
    accept_content: str | None,
    accept_pickle: bool,
    restore_unacked: bool,
    max_bytes: int,
    batch: int,
    poll_s: float,
    drainer_id: str | None,
    management_url: str | None,
    dsn: str | None,
    as_json: bool,
    dry_run_flag: bool = False,
    log_format: observe.LogFormat = "text",
    metrics_port: int | None = None,
    metrics_address: str = "127.0.0.1",
) -> None:
    # import cost: the drain's modules (runner, batch, report) load when it runs, not when
    # `ujobs-bridge --help` lists this command
    from migrate.batch import Context
    from migrate.report import Stats, print_report
    from migrate.runner import SourceOptions, broker_kind, dry_run, masked, open_source

    if follow or log_format == "json":  # a line per batch (migrate.drain) while it runs
        observe.setup_logs("INFO", log_format)
    err = notes_console(log_format)
    exporter = None
    readiness = Readiness()
    if metrics_port is not None:  # ujobs_migrate_messages_total (migrate.metrics) as it drains
        exporter = MetricsServer(
            REGISTRY, port=metrics_port, address=metrics_address, ready=readiness.check
        )
        exporter.start()
        err.print(f"metrics: http://{metrics_address}:{exporter.port}/metrics")
    info = AppInfo.from_app(load_app(app_spec))
    url = broker or info.broker_url
    if not url:
        raise click.UsageError("the app has no broker_url: pass --broker URL")
    accept = accept_from(info, accept_content, accept_pickle, max_bytes)
    if accept_pickle:
        err.print(Text(PICKLE_WARNING, style="bold red"))
    elif "pickle" in info.accept_content:
        err.print(
            "note: the app accepts pickle; pickle bodies are quarantined (pickle_refused) unless --accept-pickle"
        )
    check_broker_url(url)
    ctx = Context(info, accept, masked(url), broker_kind(url))
    options = SourceOptions(
        queues,
        all_queues,
        drainer_id or socket.gethostname(),
        restore_unacked,
        batch,
        management_url=management_url,
    )
    source = open_broker(url, info, options)
    stats = Stats(broker=masked(url), queues=list(source.queues), dry_run=dry_run_flag)
    _warn_unworkable_queues(source.queues, err)
    try:
        if getattr(source, "crash_safe", True) is False and not dry_run_flag:
            err.print(
                f"note: {ctx.broker} keeps unacked messages only in this process: a drainer killed between commit and ack loses nothing already committed, but kombu cannot return what it held"
            )
        if dry_run_flag:
            dry_run(source, ctx, stats, limit)
        else:
            reopen_options = dataclasses.replace(
                options, queues=list(source.queues) or queues, all_queues=False
            )

            def reopen() -> Source:  # after an outage (--follow): the same broker and queues
                return open_source(url, info, reopen_options)

            _drain(
                (source, url, reopen),
                ctx,
                stats,
                dsn,
                app_spec,
                follow,
                limit,
                batch,
                poll_s,
                as_json,
                err,
                readiness,
            )
    finally:
        source.close()
        if exporter is not None:
            exporter.stop()
    if log_format == "json":  # the report as one line too: a log shipper reads every line
        if as_json:
            click.echo(json.dumps(stats.as_json(), default=str, ensure_ascii=False))
        else:
            say("migrate report", logger="migrate", report=stats.as_json())
    elif as_json:
        print_json(stats.as_json())
    else:
        print_report(console(), stats)


def notes_console(log_format: str) -> Console:
    """Where the drain's notes go: stderr for people, or (``--log-format json``) one JSON object
    per line, like the log lines beside them."""
    if log_format != "json":
        return console(stderr=True)
    return Console(
        file=SaidLines("migrate"), width=100_000, no_color=True, highlight=False, soft_wrap=True
    )


def _drain(
    broker: tuple[Source, str, Callable[[], Source]],
    ctx: Context,
    stats: Stats,
    dsn: str | None,
    app_spec: str,
    follow: bool,
    limit: int | None,
    batch: int,
    poll_s: float,
    as_json: bool,
    err: Console,
    readiness: Readiness,
) -> None:
    """Drain into the database. ``--follow`` waits out outages (``migrate/outages.py``),
    reopening the source with ``reopen`` (``broker``: the source, the broker URL, ``reopen``); a
    reopened source is closed here, the first one by the caller."""
    # import cost: as in run_drain (the drain loads when it runs)
    from migrate.report import LiveProgress
    from migrate.runner import DrainLoop

    source, broker_url, reopen = broker
    resolved = database(
        dsn,
        quiet=as_json,
        config_dsn=loading.resolve(app_spec).database_url(),
        app_spec=app_spec,
    )
    ensure_schema(resolved)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def connect() -> connections.Conn:
        return connections.connect(resolved.dsn, CLI_ROLE)

    readiness.dsn, readiness.stop = resolved.dsn, stop
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    last = [0.0]
    outages = RideThrough(resolved.dsn, broker_url, connect, reopen, stop) if follow else None
    loop: DrainLoop | None = None
    with (
        LiveProgress(err, enabled=not as_json and err.is_terminal) as bar,
        _restoring(previous),
    ):

        def on_batch(s: Stats) -> None:
            now = time.monotonic()
            if bar.enabled and now - last[0] > 0.5 and loop is not None:
                last[0] = now
                bar.update(s, loop.source.remaining())

        if not as_json:
            err.print(
                f"draining {', '.join(source.queues) or '(no queues)'} from {ctx.broker}"
                + (" (follow)" if follow else "")
            )
        conn = connect()
        loop = DrainLoop(
            source, conn, ctx, stop, batch, follow, limit, poll_s, on_batch, outages=outages
        )
        try:
            loop.run(stats)
        except Exception as exc:
            raise infrastructure_error(exc, ctx.broker) from None
        finally:
            loop.conn.close()
            if loop.source is not source:  # reopened after an outage (the old one is closed)
                loop.source.close()


migrate.add_command(quarantine)
