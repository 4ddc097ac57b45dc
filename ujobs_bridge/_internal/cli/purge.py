"""``ujobs-bridge purge [--older-than 7d]``: run the retention sweep now, by hand.

Why it exists: an operator sometimes needs the space back before the hourly sweep, or runs the
sweep from their own scheduler. This runs the same targets as the ``ujobs.purge`` job, inline.

What it is not: the job (``purge.py``), which the scheduler fires hourly.
"""

from __future__ import annotations

import math
import re

import click

from ujobs_bridge._internal.cli.options import (
    CLI_ROLE,
    database,
    dsn_option,
    json_option,
    print_json,
)
from ujobs_bridge._internal.clock import SYSTEM_CLOCK
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.jobs.purge import DEFAULT_OLDER_THAN_S, cutoff_for, run_pass
from ujobs_bridge.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    match = _DURATION.match(text)
    if match is None:
        raise ConfigError(
            f"{text!r} is not a duration", hint="write a number and a unit: 90s, 30m, 12h, 7d or 2w"
        )
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not math.isfinite(seconds):
        raise ConfigError(
            f"{text[:80]!r} is past any duration", hint="write a finite number and a unit, e.g. 7d"
        )
    if seconds <= 0:
        raise ConfigError(
            f"{text!r} is not a positive duration", hint="use a duration above zero, e.g. 7d"
        )
    return seconds


@click.command()
@click.option(
    "--older-than",
    default=f"{int(DEFAULT_OLDER_THAN_S // 86400)}d",
    show_default=True,
    help="Remove finished rows older than this (90s, 30m, 12h, 7d, 2w).",
)
@dsn_option
@json_option
def purge(older_than: str, dsn: str | None, as_json: bool) -> None:
    """Remove finished jobs (with their steps), old events, published outbox rows and old fire records."""
    try:
        seconds = validation.lookback("--older-than", parse_duration(older_than))
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    resolved = database(dsn, quiet=as_json)
    with connections.connect(resolved.dsn, CLI_ROLE) as conn:
        cutoff = cutoff_for(conn, SYSTEM_CLOCK, seconds)
        report = run_pass(conn, cutoff)
    if as_json:
        print_json({"cutoff": cutoff.isoformat(), "deleted": report})
        return
    for table, count in report.items():
        click.echo(f"{table}: {count} deleted")
