"""Where the database is: ``--dsn``, else ``UJOBS_DATABASE_URL``, else the embedded Postgres; and
how a DSN is printed (password masked, always).

Why it exists: every command resolves the database the same way and says which one it chose in
one line, and no code path prints a password (argv and logs are visible to other users).

What it is not: a connection pool (see ``client.py``) or the embedded server itself
(``embedded.py``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from ujobs_bridge.errors import ConfigError, ErrorCode

ENV_DATABASE_URL = "UJOBS_DATABASE_URL"
MASK = "****"

# A parameter whose value is a secret: libpq's password and sslpassword, a broker's password,
# secret, token or access key (in a query string or as key=value).
SECRET_PARAM = re.compile(r"pass|pwd|secret|token|credential|api[_-]?key|access[_-]?key", re.I)
_KV_PARAM = re.compile(
    r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*(?:'|$)|\S*)"
)


def _kv_secrets(dsn: str) -> list[str]:
    return [
        m.group("value") for m in _KV_PARAM.finditer(dsn) if SECRET_PARAM.search(m.group("key"))
    ]


def _split_url(dsn: str) -> tuple[str, str | None, str, str]:
    """``scheme://userinfo@rest?query`` cut by hand (``urlsplit`` raises on some malformed URLs):
    the userinfo is everything up to the LAST ``@`` before the query, so a password holding
    ``/``, ``:`` or ``#`` is still found."""
    scheme, _, rest = dsn.partition("://")
    body, mark, query = rest.partition("?")
    at = body.rfind("@")
    if at < 0:
        return scheme, None, body, mark + query
    return scheme, body[:at], body[at + 1 :], mark + query


def secrets_of(dsn: str) -> list[str]:
    """Every secret a DSN or broker URL holds, as written and percent-decoded (longest first):
    what must never be printed, whatever the text around it."""
    found: list[str] = []
    if "://" in dsn:
        _, userinfo, _, query = _split_url(dsn)
        _, colon, password = (userinfo or "").partition(":")
        if colon and password:
            found.append(password)
        for pair in query.lstrip("?").split("&"):
            key, eq, value = pair.partition("=")
            if eq and value and SECRET_PARAM.search(unquote(key)):
                found.append(value)
    else:
        found.extend(v.strip("'") for v in _kv_secrets(dsn))
    found += [unquote(v) for v in found]
    return sorted({v for v in found if v}, key=len, reverse=True)


def scrub(text: str, dsn: str) -> str:
    """``text`` (an error message, say) with every secret of ``dsn`` replaced by ``****``."""
    for secret in secrets_of(dsn):
        text = text.replace(secret, MASK)
    return text


def mask_dsn(dsn: str) -> str:
    """The DSN with every password-like value replaced by ``****``: the URL's password and any
    secret query parameter, or any secret ``key=value``. Never raises, even on a malformed DSN."""
    if "://" in dsn:
        scheme, userinfo, hostpart, query = _split_url(dsn)
        user, colon, password = (userinfo or "").partition(":")
        if colon and password:
            userinfo = f"{user}:{MASK}"
        if query:
            pairs = []
            for pair in query[1:].split("&"):
                key, eq, value = pair.partition("=")
                secret = eq and value and SECRET_PARAM.search(unquote(key))
                pairs.append(f"{key}={MASK}" if secret else pair)
            query = "?" + "&".join(pairs)
        authority = "" if userinfo is None else userinfo + "@"
        return f"{scheme}://{authority}{hostpart}{query}"
    return _KV_PARAM.sub(
        lambda m: (
            m.group("key") + m.group("eq") + MASK
            if SECRET_PARAM.search(m.group("key"))
            else m.group(0)
        ),
        dsn,
    )


def check_dsn(dsn: str, what: str = "database DSN") -> str:
    """``dsn`` if libpq can parse it, else ``UJ_DSN_INVALID`` with libpq's reason, the DSN masked
    and no secret anywhere in the message."""
    try:
        conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        reason = scrub(str(exc).strip(), dsn)
        raise ConfigError(
            f"the {what} {mask_dsn(dsn)} is malformed: {reason}",
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
    dsn: str | None = None, *, config_dsn: str | None = None, quiet: bool = False
) -> ResolvedDatabase:
    """Pick the database by the documented order; start the embedded one only if nothing is set."""
    if dsn:
        check_dsn(dsn, "--dsn")
        return ResolvedDatabase(dsn, "flag", f"database: {mask_dsn(dsn)} (--dsn)")
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
