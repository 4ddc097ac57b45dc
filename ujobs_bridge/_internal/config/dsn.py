"""Where the database is: ``--dsn``, else ``UJOBS_DATABASE_URL``, else the embedded Postgres; and
how a DSN is printed (password masked, always: ``observe/redaction.py`` masks it, as it hides
every other secret).

Why it exists: every command resolves the database the same way and says which one it chose in
one line, and no code path prints a password (argv and logs are visible to other users).

What it is not: a connection pool (see ``client.py``) or the embedded server itself
(``embedded.py``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from ujobs_bridge._internal.observe.redaction import MASK, mask_dsn, scrub, secrets_of
from ujobs_bridge._internal.observe.redaction import url_shaped as _url_shaped
from ujobs_bridge.errors import ConfigError, ErrorCode

ENV_DATABASE_URL = "UJOBS_DATABASE_URL"
# Masking lives with every other redaction (one module); these names are the DSN's view of it.
__all__ = ["MASK", "check_dsn", "mask_dsn", "resolve", "scrub", "secrets_of"]


_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.%]+")


def _bad_part(params: dict[str, Any]) -> str | None:
    """What libpq would accept here but never connect with: a port that is not a number from 1
    to 65535 (``5432:5432``), a host name with characters no host name has."""
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            return f"the port {port!r} is not a number from 1 to 65535"
    for host in str(params.get("host") or "").split(","):
        if host and not host.startswith(("/", "@")) and not _HOST_NAME.fullmatch(host):
            return f"the host {host!r} is not a host name, an IP address or a socket directory"
    return None


def check_dsn(dsn: str, what: str = "database DSN") -> str:
    """``dsn`` if libpq can parse it and its hosts and ports can be ones, else
    ``UJ_DSN_INVALID`` with the reason, the DSN masked and no secret anywhere in the message."""
    no_slashes = _url_shaped(dsn) and "://" not in dsn
    try:
        params = conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        reason: str | None = str(exc).strip()
    else:
        reason = _bad_part(params)
    if no_slashes:
        reason = 'it has no "://" after its scheme (postgresql://...)'
    if "\x00" in dsn:  # libpq reads a C string: everything after a NUL would be dropped
        reason = "it holds a NUL character"
    if reason is not None:
        raise ConfigError(
            f"the {what} {mask_dsn(dsn)} is malformed: {scrub(reason, dsn)}",
            hint="write it as postgresql://USER:PASSWORD@HOST:PORT/DBNAME (percent-encode "
            "special characters in the password) or as key=value pairs",
            code=ErrorCode.DSN_INVALID,
        ) from None
    return dsn


@dataclass(frozen=True, slots=True)
class ResolvedDatabase:
    dsn: str
    source: str  # "flag", "env", "config" or "embedded"
    note: str  # the one line a command prints about it
    app_spec: str | None = None  # the -A app whose ujobs_database_url this is ("config")

    @property
    def masked(self) -> str:
        return mask_dsn(self.dsn)

    @property
    def upgrade_command(self) -> str:
        """The command that upgrades THIS database: ``-A app`` when the app named it, else
        ``--dsn`` with the DSN (its password masked)."""
        if self.source == "config" and self.app_spec:
            return f"ujobs-bridge db upgrade -A {self.app_spec}"
        return upgrade_command_for(self.dsn)


# where a command line keeps the database it resolved (click's context meta), for its hints
RESOLVED_KEY = "ujobs_bridge.resolved_database"


def upgrade_command_for(dsn: str) -> str:
    """``ujobs-bridge db upgrade --dsn '<dsn>'``, the password masked (put it back to run it)."""
    return f"ujobs-bridge db upgrade --dsn '{mask_dsn(dsn)}'"


def resolve(
    dsn: str | None = None,
    *,
    config_dsn: str | None = None,
    quiet: bool = False,
    given_as: str = "--dsn",
) -> ResolvedDatabase:
    """Pick the database by the documented order; start the embedded one only if nothing is set.
    ``given_as``: what ``dsn`` is called in an error (the flag, or an API's argument)."""
    if dsn:
        check_dsn(dsn, given_as)
        return ResolvedDatabase(dsn, "flag", f"database: {mask_dsn(dsn)} ({given_as})")
    env = os.environ.get(ENV_DATABASE_URL)
    if env:
        check_dsn(env, ENV_DATABASE_URL)
        return ResolvedDatabase(env, "env", f"database: {mask_dsn(env)} ({ENV_DATABASE_URL})")
    if config_dsn:
        check_dsn(config_dsn, "app's ujobs_database_url")
        return ResolvedDatabase(
            config_dsn, "config", f"database: {mask_dsn(config_dsn)} (app config)"
        )
    # import cost: platformdirs and the embedded server's code load only when no DSN is set
    from ujobs_bridge._internal.config.embedded import ensure_embedded

    started = ensure_embedded()
    verb = "started" if started.started else "reused"
    note = (
        f"database: embedded Postgres {verb} in {started.data_dir} "
        f"(no --dsn or {ENV_DATABASE_URL} set)"
    )
    return ResolvedDatabase(started.dsn, "embedded", note)
