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
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

ENV_DATABASE_URL = "UJOBS_DATABASE_URL"
MASK = "****"

_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def mask_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``****``; URL and key=value forms both."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            if ":" in userinfo:
                user, _, password = userinfo.partition(":")
                if password:
                    userinfo = f"{user}:{MASK}"
            netloc = f"{userinfo}@{hostport}"
        query = parts.query
        if query:
            pairs = [
                (k, MASK if k.lower() == "password" else v)
                for k, v in parse_qsl(query, keep_blank_values=True)
            ]
            query = urlencode(pairs, safe="/*")
        return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, query, parts.fragment))
    return _KV_PASSWORD.sub(lambda m: m.group(1) + MASK, dsn)


@dataclass(frozen=True, slots=True)
class ResolvedDatabase:
    dsn: str
    source: str  # "flag", "env", "config" or "embedded"
    note: str  # the one line a command prints about it

    @property
    def masked(self) -> str:
        return mask_dsn(self.dsn)


def resolve(
    dsn: str | None = None, *, config_dsn: str | None = None, quiet: bool = False
) -> ResolvedDatabase:
    """Pick the database by the documented order; start the embedded one only if nothing is set."""
    if dsn:
        return ResolvedDatabase(dsn, "flag", f"database: {mask_dsn(dsn)} (--dsn)")
    env = os.environ.get(ENV_DATABASE_URL)
    if env:
        return ResolvedDatabase(env, "env", f"database: {mask_dsn(env)} ({ENV_DATABASE_URL})")
    if config_dsn:
        return ResolvedDatabase(
            config_dsn, "config", f"database: {mask_dsn(config_dsn)} (app config)"
        )
    from .embedded import ensure_embedded

    started = ensure_embedded()
    verb = "started" if started.started else "reused"
    note = (
        f"database: embedded Postgres {verb} in {started.data_dir} "
        f"(no --dsn or {ENV_DATABASE_URL} set)"
    )
    return ResolvedDatabase(started.dsn, "embedded", note)
