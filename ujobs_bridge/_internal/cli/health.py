"""``ujobs-bridge health [--queue Q] [--max-age S] [--json]``: exit 0 when healthy, 1 when not.

Why it exists: a cron job, a CI step or a load balancer's probe needs one command whose exit
code says whether the jobs system works: the database answers, its schema is current, each
queue has a live worker, and no ready job has waited longer than ``--max-age``. See
``health.py`` for the checks.

What it is not: monitoring over time (``/metrics``).
"""

from __future__ import annotations

import sys

import click

from ujobs_bridge._internal.cli.options import (
    APP,
    app_database,
    dsn_option,
    json_option,
    print_json,
)
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.observe.health import check
from ujobs_bridge.errors import ConfigError


@click.command()
@click.option(
    "--queue", "-Q", "queues", multiple=True, help="A queue that must be served (repeatable)."
)
@click.option(
    "--max-age",
    "max_age_s",
    default=None,
    type=float,
    help="Fail when a queue's oldest ready job has waited longer than this many seconds.",
)
@APP
@dsn_option
@json_option
def health(
    queues: tuple[str, ...],
    max_age_s: float | None,
    app_spec: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Check the jobs system; exit 0 if every check passes, 1 if any fails."""
    try:
        for queue in queues:
            validation.queue_name(queue)
        if max_age_s is not None:
            validation.seconds("--max-age", max_age_s, allow_zero=True)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    resolved = app_database(app_spec, dsn, quiet=as_json)
    report = check(
        resolved.dsn,
        queues=queues,
        max_age_s=max_age_s,
        upgrade_command=resolved.upgrade_command,
    )
    if as_json:
        print_json(report.as_json())
    else:
        for c in report.checks:
            mark = "skip" if c.skipped else ("ok" if c.ok else "FAIL")
            click.echo(f"{mark:4} {c.name}: {c.detail}")
    sys.exit(0 if report.ok else 1)
