"""``ujobs-bridge dashboard``: serve the web UI (``ujobs_bridge/dashboard``) with uvicorn.

Why it exists: Flower's habits (``--address``, ``--port``, ``--url-prefix``) on the bridge's
database, safe by default: it binds 127.0.0.1; any other address requires ``--auth user:pass``
or a token in ``$UJOBS_DASHBOARD_TOKEN`` (it refuses to start otherwise, and refuses a blank
or whitespace-only token, user or password); it answers only the hosts it is bound to and the
localhost names unless ``--allowed-host`` adds more; a browser's session ends after
``--session-idle`` without a request and ``--session-max-age`` after it began; ``--read-only``
hides and refuses every action.

What it is not: the app (``dashboard/app.py``).
"""

from __future__ import annotations

import ipaddress
import os

import click

from ujobs_bridge._internal.cli.options import APP, app_database, dsn_option, log_format_option
from ujobs_bridge._internal.cli.purge import parse_duration
from ujobs_bridge._internal.cli.scheduler import load_tasks, resolve_app
from ujobs_bridge._internal.dashboard.config import (
    SESSION_IDLE_S,
    SESSION_MAX_AGE_S,
    DashboardConfig,
    default_allowed_hosts,
)
from ujobs_bridge._internal.observe import logs
from ujobs_bridge._internal.observe.logs import LogFormat
from ujobs_bridge.errors import ConfigError, ErrorCode

TOKEN_ENV = "UJOBS_DASHBOARD_TOKEN"  # noqa: S105 (the variable's name, not a secret)


def _local(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _prefix(value: str) -> str:
    value = value.strip().strip("/")
    return f"/{value}" if value else ""


def _credentials(auth: str | None) -> tuple[str, str] | None:
    """``--auth USER:PASS`` as a pair; a blank or whitespace-only user or password refused."""
    if auth is None:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user.strip() or not password.strip():
        raise ConfigError(
            "--auth takes USER:PASS, and neither may be empty or whitespace only",
            hint="give a real user name and password (or set a token in "
            f"${TOKEN_ENV}); a blank one would let anyone in",
            code=ErrorCode.DASHBOARD_CREDENTIALS_INVALID,
        )
    return user, password


def _token(value: str | None) -> str | None:
    """``$UJOBS_DASHBOARD_TOKEN`` if set; set but blank or whitespace only is refused."""
    if value is None:
        return None
    if not value.strip():
        raise ConfigError(
            f"${TOKEN_ENV} is set but blank or whitespace only",
            hint="set it to a long random token (e.g. `openssl rand -hex 32`) or unset it",
            code=ErrorCode.DASHBOARD_CREDENTIALS_INVALID,
        )
    return value


def _duration_text(seconds: float) -> str:
    return f"{int(seconds // 3600)}h" if seconds % 3600 == 0 else f"{int(seconds // 60)}m"


def _session_duration(flag: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise click.UsageError(f"{flag}: {exc.render()}") from exc


@click.command()
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=5555, show_default=True, type=click.IntRange(0, 65535))
@click.option("--url-prefix", default="", help="Serve under this path (behind a proxy).")
@click.option(
    "--auth", default=None, metavar="USER:PASS", help=f"Basic auth (or ${TOKEN_ENV}: a token)."
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name (or address) the dashboard is reached by, besides the bound address and "
    "localhost; repeatable. Requests naming any other host are refused.",
)
@click.option("--read-only", is_flag=True, help="Show everything, allow no action.")
@click.option(
    "--session-idle",
    default=_duration_text(SESSION_IDLE_S),
    show_default=True,
    metavar="DURATION",
    help="End a browser's session after this long without a request (90s, 30m, 12h).",
)
@click.option(
    "--session-max-age",
    default=_duration_text(SESSION_MAX_AGE_S),
    show_default=True,
    metavar="DURATION",
    help="End a browser's session this long after it began, however active (90s, 30m, 12h).",
)
@click.option(
    "--loglevel",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@log_format_option
@APP
@dsn_option
def dashboard(
    address: str,
    port: int,
    url_prefix: str,
    auth: str | None,
    allowed_hosts: tuple[str, ...],
    read_only: bool,
    session_idle: str,
    session_max_age: str,
    loglevel: str,
    log_format: LogFormat,
    app_spec: str | None,
    dsn: str | None,
) -> None:
    """Serve the web dashboard (overview, jobs, dead letters, scheduled tasks, ...)."""
    try:
        # optional: uvicorn, starlette and jinja2 come with the dashboard extra
        import uvicorn

        # optional: the application imports starlette and jinja2 (the dashboard extra)
        from ujobs_bridge._internal.dashboard.app import create_app
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs its extra ({exc.name}): pip install 'ujobs-bridge[dashboard]'"
        ) from exc
    credentials = _credentials(auth)
    token = _token(os.environ.get(TOKEN_ENV))
    idle_s = _session_duration("--session-idle", session_idle)
    max_age_s = _session_duration("--session-max-age", session_max_age)
    if not _local(address) and credentials is None and token is None:
        raise click.UsageError(
            f"--address {address} is not local: give --auth USER:PASS or set ${TOKEN_ENV}, "
            "so the dashboard is not open to the network"
        )
    logs.setup(loglevel.upper(), log_format)
    resolved = app_database(app_spec, dsn)
    tasks = {}
    if app_spec is not None:
        tasks = load_tasks(resolve_app(app_spec), with_purge=True)
    config = DashboardConfig(
        dsn=resolved.dsn,
        url_prefix=_prefix(url_prefix),
        read_only=read_only,
        credentials=credentials,
        token=token,
        tasks=tasks,
        app_spec=app_spec,
        allowed_hosts=default_allowed_hosts(address, allowed_hosts),
        session_idle_s=idle_s,
        session_max_age_s=max_age_s,
    )
    app = create_app(config)
    where = f"http://{address}:{port}{config.url_prefix}/"
    mode = " (read-only)" if read_only else ""
    logs.say(f"dashboard ready: {where}{mode}")
    hosts = ", ".join(sorted(config.allowed_hosts))
    logs.say(f"answers requests for the hosts {hosts} (add one: --allowed-host NAME)")
    uvicorn.run(app, host=address, port=port, log_config=None, access_log=False)
