"""``ujobs-bridge events send EVENT KEY [--payload JSON]``: wake jobs waiting for an event.

Why it exists: an operator or a shell script (a deploy hook, a cron) must be able to deliver the
event a ``step.wait_for_event`` is parked on, without writing Python.

What it is not: the event store (``events.py``).
"""

from __future__ import annotations

import json

import click

from ujobs_bridge._internal.cli.options import database, dsn_option, json_option, print_json
from ujobs_bridge._internal.jobs.events import send_event
from ujobs_bridge.client import Client
from ujobs_bridge.errors import ConfigError


@click.group()
def events() -> None:
    """Send events to waiting jobs."""


@events.command()
@click.argument("event")
@click.argument("key")
@click.option("--payload", default="null", metavar="JSON", help="The event's payload, as JSON.")
@dsn_option
@json_option
def send(event: str, key: str, payload: str, dsn: str | None, as_json: bool) -> None:
    """Store EVENT for KEY and wake every job waiting for it."""
    try:
        body = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.UsageError(
            str(
                ConfigError(
                    f"--payload is not JSON: {exc}",
                    hint="quote it for the shell, e.g. --payload '{\"ok\": true}'",
                )
            )
        ) from exc
    client = Client(database(dsn, quiet=as_json), max_size=1)
    try:
        sent = send_event(event, key, body, client=client)
    finally:
        client.close()
    if as_json:
        print_json({"id": sent.id, "woken": sent.woken})
    else:
        click.echo(f"sent {event} {key} (event {sent.id}); woke {sent.woken} waiting job(s)")
