"""``ujobs-bridge embedded status | stop``: the private Postgres the commands start when no DSN
is configured.

Why it exists: the embedded server keeps running after a command (so the next one starts in
milliseconds); an operator needs to see that and stop it. See ``embedded.py``.

What it is not: a way to start it (any command that needs the database does), or to stop a
Postgres given by ``--dsn``.
"""

from __future__ import annotations

import click

from ujobs_bridge._internal.cli.options import json_option, print_json
from ujobs_bridge._internal.config.embedded import EmbeddedStatus, embedded_status, stop_embedded


def _json(s: EmbeddedStatus) -> dict[str, object]:
    return {
        "data_dir": str(s.data_dir),
        "initialised": s.exists,
        "running": s.running,
        "pid": s.pid,
        "socket_dir": s.socket_dir,
        "port": s.port,
    }


@click.group()
def embedded() -> None:
    """The embedded Postgres under $UJOBS_HOME (used when no --dsn / UJOBS_DATABASE_URL)."""


@embedded.command()
@json_option
def status(as_json: bool) -> None:
    """Whether the embedded Postgres runs (exit 0 either way)."""
    s = embedded_status()
    if as_json:
        print_json(_json(s))
    elif s.running:
        click.echo(f"running: pid {s.pid}, socket {s.socket_dir}, data {s.data_dir}")
    elif s.exists:
        click.echo(f"stopped: data {s.data_dir} (the next command starts it)")
    else:
        click.echo(f"not created: {s.data_dir} (the first command without --dsn creates it)")


@embedded.command()
@click.option("--timeout", "timeout_s", default=30.0, show_default=True, type=float)
@json_option
def stop(timeout_s: float, as_json: bool) -> None:
    """Stop the embedded Postgres (fast shutdown: sessions end, committed data is kept)."""
    before = stop_embedded(timeout_s)
    if as_json:
        print_json({**_json(before), "stopped": before.running})
    elif before.running:
        click.echo(f"stopped the embedded Postgres (pid {before.pid})")
    else:
        click.echo("the embedded Postgres was not running")
