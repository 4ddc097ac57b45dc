"""``ujobs-bridge outbox relay``: publish staged outbox rows as jobs, as a process of its own.

Why it exists: ``ujobs-bridge scheduler`` relays the outbox of the jobs database itself, but rows
staged in ANOTHER database (an application database whose transactions cannot reach the jobs
database) need a relay that reads that database and writes the jobs one. Run one per source
database (a second one waits its turn: the relay takes a lock per batch). SIGTERM finishes the
batch in hand, marks it, and exits 0.

What it is not: the relay (``outbox/relay.py``) or staging (``outbox/staging.py``).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from ujobs_bridge._internal.cli.options import (
    database,
    dsn_option,
    log_format_option,
    pgbouncer_option,
)
from ujobs_bridge._internal.config.dsn import check_dsn, mask_dsn
from ujobs_bridge._internal.config.schema_access import ensure_schema
from ujobs_bridge._internal.observe import logs
from ujobs_bridge._internal.observe.logs import LogFormat
from ujobs_bridge._internal.outbox.relay import DEFAULT_BATCH, OutboxRelay
from ujobs_bridge.errors import ConfigError


@click.group()
def outbox() -> None:
    """The transactional outbox."""


@outbox.command("relay")
@click.option(
    "--source",
    "source_dsn",
    default=None,
    metavar="URL",
    help="The database whose x_outbox to read. Default: the jobs database (--dsn).",
)
@click.option("--batch", default=DEFAULT_BATCH, show_default=True, type=int, help="Rows per batch.")
@click.option(
    "--interval",
    "interval_s",
    default=0.5,
    show_default=True,
    type=float,
    help="Seconds between polls when the outbox is empty.",
)
@click.option(
    "--loglevel",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@pgbouncer_option
@log_format_option
@dsn_option
def relay(
    source_dsn: str | None,
    batch: int,
    interval_s: float,
    loglevel: str,
    log_format: LogFormat,
    dsn: str | None,
) -> None:
    """Publish staged rows in order until SIGTERM (which finishes the batch in hand)."""
    logs.setup(loglevel.upper(), log_format)
    resolved = database(dsn)
    if source_dsn:
        check_dsn(source_dsn, "--source-dsn")
    try:
        runner = OutboxRelay(
            source_dsn or resolved.dsn, target_dsn=resolved.dsn, batch=batch, interval_s=interval_s
        )
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    ensure_schema(resolved)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    runner.start()
    where = "the jobs database" if not runner.cross_database else mask_dsn(runner.source_dsn)
    logs.say(f"outbox relay ready: reading {where}")
    while not stop.wait(0.5):
        pass
    runner.stop()
    logs.say(f"outbox relay stopped: published={runner.published}")
