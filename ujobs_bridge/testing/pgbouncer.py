"""A real PgBouncer in transaction mode in front of a test server: ``PgBouncer``.

Why it exists: most managed setups put PgBouncer (``pool_mode = transaction``) between workers
and Postgres, and what breaks there (session settings, server-side prepared statements, LISTEN,
advisory locks held across transactions) breaks only against the real thing. This writes an ini
into a temporary directory, starts the ``pgbouncer`` binary on a free port of 127.0.0.1 (as a
non-root user when run as root: it refuses root), and gives ``dsn(dbname)``: the same database
through the bouncer. Every database of the server is reachable (``* = host=... port=...``), with
trust authentication, so it suits the throwaway databases of ``TemporaryDatabase``. ``close()``
stops it (by the pid it wrote) and removes the directory.

What it is not: a production configuration, or a fixture by itself (``tests/conftest.py`` and
benches wrap it). It needs the ``pgbouncer`` package (Debian: ``apt-get install pgbouncer``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psycopg

from ujobs_bridge._internal.db import testing as testing_db
from ujobs_bridge.errors import DatabaseUnavailableError
from ujobs_bridge.testing.cluster import PrivateCluster, free_port
from ujobs_bridge.testing.database import admin_dsn_from_env

START_TIMEOUT_S = 30.0
DEFAULT_POOL_SIZE = 20


def binary() -> str | None:
    """The ``pgbouncer`` program on PATH (or in /usr/sbin), else None."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def version() -> tuple[int, ...]:
    """PgBouncer's version (``(1, 18, 0)``); ``()`` when it is not installed."""
    found = binary()
    if found is None:
        return ()
    out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout
    words = out.split()
    for word in words:
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return tuple(int(p) for p in parts)
    return ()


def server_address() -> tuple[str, int]:
    """The host and port of the tests' server (``UJOBS_TEST_ADMIN_DSN``, else 127.0.0.1:5432)."""
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn_from_env())
    host = str(info.get("host") or "127.0.0.1")
    return host, int(info.get("port") or 5432)


class PgBouncer:
    """``with PgBouncer(host, port) as bouncer:`` a transaction-mode bouncer; ``bouncer.dsn(db)``
    reaches database ``db`` of the server at ``host:port`` (by default the tests' server,
    ``server_address()``) through it."""

    def __init__(
        self,
        server_host: str | None = None,
        server_port: int | None = None,
        *,
        user: str = "postgres",
        pool_size: int = DEFAULT_POOL_SIZE,
        port: int | None = None,
    ) -> None:
        found = binary()
        if found is None:
            raise DatabaseUnavailableError(
                "pgbouncer is not installed",
                hint="install it (Debian: apt-get install -y pgbouncer)",
            )
        self.program = found
        default_host, default_port = server_address()
        self.server_host = server_host or default_host
        self.server_port = server_port or default_port
        self.user = user
        self.pool_size = pool_size
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ujobs-pgbouncer-"))
        self.dir.chmod(0o755)  # readable by the user it runs as
        self.ini = self.dir / "pgbouncer.ini"
        self.log = self.dir / "pgbouncer.log"
        self.pidfile = self.dir / "pgbouncer.pid"
        self.run_as = PrivateCluster._service_user()
        self.running = False

    def dsn(self, dbname: str) -> str:
        """Database ``dbname`` through the bouncer."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}?connect_timeout=5"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> PgBouncer:
        if self.running:
            return self
        auth = self.dir / "userlist.txt"
        auth.write_text(f'"{self.user}" ""\n')
        self.ini.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={self.server_host} port={self.server_port}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    f"unix_socket_dir = {self.dir}",
                    "auth_type = trust",
                    f"auth_file = {auth}",
                    f"admin_users = {self.user}",
                    "pool_mode = transaction",
                    f"default_pool_size = {self.pool_size}",
                    "max_client_conn = 1000",
                    f"pidfile = {self.pidfile}",
                    f"logfile = {self.log}",
                    "ignore_startup_parameters = extra_float_digits",
                    "server_reset_query =",
                    "",
                ]
            )
        )
        for path in (auth, self.ini):
            path.chmod(0o644)
        command = [self.program, "-d", str(self.ini)]  # -d: daemon, writes the pid file
        if self.run_as is not None:
            runuser = shutil.which("runuser") or "/usr/sbin/runuser"
            command = [runuser, "-u", self.run_as, "--", *command]
            shutil.chown(self.dir, self.run_as)
        done = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            raise DatabaseUnavailableError(
                f"pgbouncer did not start: {done.stderr.strip()} {self.bouncer_log()[-1000:]}",
                hint="check the log and that the port is free",
            )
        self.running = True
        self._wait_listening()
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1),
            ):
                return
            if time.monotonic() > deadline:
                raise DatabaseUnavailableError(
                    f"pgbouncer never listened on port {self.port}: {self.bouncer_log()[-1000:]}",
                    hint="check the log",
                )
            time.sleep(0.05)  # the port is not open yet: try again

    def clients(self) -> list[tuple[str, str]]:
        """``(database, application_name)`` of each client connected now (``SHOW CLIENTS`` on
        the admin console), the console's own connection left out."""
        return [
            c for c in testing_db.pgbouncer_clients(self.dsn("pgbouncer")) if c[0] != "pgbouncer"
        ]

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        """Stop it (SIGINT: at once, connections closed) and remove its directory. Idempotent."""
        pid = self.pid()
        if self.running and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + START_TIMEOUT_S
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)  # waiting for that one process to exit
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.running = False
        shutil.rmtree(self.dir, ignore_errors=True)

    def bouncer_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def __enter__(self) -> PgBouncer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
