"""Flags shared by several commands, and how a command finds its database.

Why it exists: ``--dsn``, ``-A`` and ``--json`` mean the same thing everywhere, and the one line
that says which database a command is using (always with the password masked) is printed in one
place. ``-A`` names an app as ``celery -A`` does; a command that takes it only to find the
database uses the app's own (``app_database``), below ``--dsn``.

What it is not: configuration storage.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.config.dsn import (
    RESOLVED_KEY,
    ResolvedDatabase,
    check_dsn,
    mask_dsn,
    resolve,
)
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db.connections import Role
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.observe import logs
from ujobs_bridge.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

CLI_ROLE = Role("cli")  # every connection a command opens (``db.connections.connect``)


def dsn_option(fn: F) -> F:
    return click.option(
        "--dsn",
        envvar=None,
        default=None,
        metavar="URL",
        help="Postgres DSN. Default: $UJOBS_DATABASE_URL, else an embedded Postgres under $UJOBS_HOME.",
    )(fn)


def _use_pgbouncer(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        connections.use_pgbouncer(True)


def pgbouncer_option(fn: F) -> F:
    """``--pgbouncer``: this process (and the processes it starts) connects through PgBouncer in
    transaction mode; the same as ``UJOBS_PGBOUNCER=1`` (``connections.behind_pgbouncer``)."""
    return click.option(
        "--pgbouncer",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_use_pgbouncer,
        help="The DSN goes through PgBouncer in transaction mode (as UJOBS_PGBOUNCER=1): no "
        "session state, no prepared statements, wake-ups from --listen-dsn or polling.",
    )(fn)


def _use_listen_dsn(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:
        check_dsn(value, "--listen-dsn")
        os.environ[connections.ENV_LISTEN_URL] = value  # read by connections.listen_dsn


def listen_dsn_option(fn: F) -> F:
    """``--listen-dsn URL``: a direct connection (not through PgBouncer) for LISTEN wake-ups;
    the same as ``UJOBS_LISTEN_URL``."""
    return click.option(
        "--listen-dsn",
        metavar="URL",
        default=None,
        expose_value=False,
        callback=_use_listen_dsn,
        help="A direct connection to the same database for LISTEN wake-ups (as "
        "UJOBS_LISTEN_URL). Default: the DSN, unless behind PgBouncer: then polling.",
    )(fn)


def app_option(help_text: str, *, required: bool = False) -> Callable[[F], F]:
    """``-A/--app MODULE[:ATTR]``, resolved as ``celery -A`` resolves it (``loading.resolve``)."""

    def decorate(fn: F) -> F:
        return click.option(
            "-A",
            "--app",
            "app_spec",
            default=None,
            required=required,
            metavar="MODULE[:ATTR]",
            help=help_text,
        )(fn)

    return decorate


def app_database(app_spec: str | None, dsn: str | None, *, quiet: bool = False) -> ResolvedDatabase:
    """The database of a command that takes ``-A`` only to find it (``jobs``, ``migrate
    quarantine``), in ``database``'s order: ``--dsn``, else the app's ``ujobs_database_url``, else
    ``$UJOBS_DATABASE_URL``, else the embedded one. The app is resolved only when ``--dsn`` does
    not already decide (importing it runs its code); one that holds nothing is refused."""
    config_dsn = None
    if app_spec is not None and not dsn:
        try:
            app = loading.resolve(app_spec)
        except ConfigError as exc:
            raise click.UsageError(exc.render()) from exc
        config_dsn = app.database_url()
        if config_dsn is None and type(app) is loading.LoadedApp and not app.jobs():
            raise click.UsageError(loading.not_found(app_spec, app.target, "app or jobs").render())
    return database(dsn, quiet=quiet, config_dsn=config_dsn, app_spec=app_spec)


def log_format_option(fn: F) -> F:
    """``--log-format text|json`` (default ``$UJOBS_LOG_FORMAT``, else text): see ``logs.py``."""
    return click.option(
        "--log-format",
        "log_format",
        type=click.Choice(["text", "json"]),
        default="text",
        envvar="UJOBS_LOG_FORMAT",
        show_default=True,
        help="text for people, json for log pipelines (one object per line, with job ids).",
    )(fn)


def metrics_options(fn: F) -> F:
    """``--metrics-port N`` and ``--metrics-address``: serve /metrics, /healthz and /readyz."""
    fn = click.option(
        "--metrics-address",
        default="127.0.0.1",
        show_default=True,
        help="Address for --metrics-port (0.0.0.0: every interface).",
    )(fn)
    return click.option(
        "--metrics-port",
        default=None,
        type=click.IntRange(0, 65535),
        help="Serve Prometheus /metrics, /healthz and /readyz on this port.",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def database(
    dsn: str | None,
    *,
    quiet: bool = False,
    config_dsn: str | None = None,
    app_spec: str | None = None,
) -> ResolvedDatabase:
    """The command's database: ``--dsn``, else the ``-A`` app's own URL (``config_dsn``: what the
    app itself connects to, so its sends and the command agree; ``app_spec``: that app's ``-A``,
    for the hints), else ``$UJOBS_DATABASE_URL``, else the embedded Postgres. Kept in the click
    context (``resolved_database``) for the error hints of the command line."""
    if not dsn and config_dsn:
        check_dsn(config_dsn, "-A app's ujobs_database_url")
        resolved = ResolvedDatabase(
            config_dsn,
            "config",
            f"database: {mask_dsn(config_dsn)} (the -A app's ujobs_database_url)",
            app_spec,
        )
    else:
        resolved = resolve(dsn, config_dsn=config_dsn)
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[RESOLVED_KEY] = resolved
    if not quiet:
        logs.say(resolved.note)
    return resolved


def resolved_database() -> ResolvedDatabase | None:
    """The database this command resolved (``database``), if it got that far."""
    context = click.get_current_context(silent=True)
    found = None if context is None else context.meta.get(RESOLVED_KEY)
    return found if isinstance(found, ResolvedDatabase) else None


def checked_filters(**flags: str | None) -> None:
    """Refuse, as a usage error (exit 2), a filter flag's text no stored value can match (a NUL,
    a lone surrogate, empty or too long) before any query: ``checked_filters(name=name)``."""
    for flag, value in flags.items():
        if value is None:
            continue
        try:
            validation.filter_text(f"--{flag.replace('_', '-')}", value)
        except ConfigError as exc:
            raise click.UsageError(exc.render()) from exc


def print_json(value: Any) -> None:
    """``value`` as JSON; datetimes as ISO 8601 wherever they are (``jobs ls`` and ``jobs stats``
    agree)."""
    # import cost: rich (output.py) is loaded by commands that print tables, not by `worker`
    from ujobs_bridge._internal.cli.output import iso_default

    click.echo(json.dumps(value, indent=2, default=iso_default, ensure_ascii=False))


APP = app_option("Use this app's database (its ujobs_database_url); --dsn wins.")
