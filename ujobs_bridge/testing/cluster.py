"""A private PostgreSQL server a test may stop, crash and restart: ``PrivateCluster``.

Why it exists: outage tests (a restart ``-m fast``, a crash ``-m immediate``, a server that is
"starting up" for a while) must never touch a server other tests and helpers share. This runs
``initdb`` into a temporary directory and ``pg_ctl`` on a free port of 127.0.0.1, as a non-root
user when run as root (Postgres refuses root: ``postgres`` if it exists, else a system user it
creates once), and removes everything on ``close()``. ``TemporaryDatabase(cluster.admin_dsn)``
gives a database with the schema on it. Fault tests and soaks share it.

What it is not: the embedded default (``embedded.py``, one long-lived server per user) or a
fixture by itself (``tests/conftest.py`` and the pytest plugin wrap it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from ujobs_bridge.errors import DatabaseUnavailableError

PG_ROOT = Path("/usr/lib/postgresql")
SERVICE_USER = "ujobs-pg"
TIMEOUT_S = 120


def binaries() -> Path | None:
    """The ``bin`` directory of the newest PostgreSQL under /usr/lib/postgresql (Debian's
    layout), else the directory of ``pg_ctl`` on PATH; ``None`` if there is none."""
    if PG_ROOT.is_dir():
        versions = sorted(
            (p for p in PG_ROOT.iterdir() if (p / "bin" / "pg_ctl").exists()),
            key=lambda p: int(p.name) if p.name.isdigit() else 0,
        )
        if versions:
            return versions[-1] / "bin"
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateCluster:
    """``with PrivateCluster() as pg:`` a server at ``pg.admin_dsn``; ``pg.restart("fast")``,
    ``pg.stop("immediate")`` / ``pg.start()``. Every method waits for the server to be up or
    down (``pg_ctl -w``)."""

    def __init__(self, *, port: int | None = None) -> None:
        found = binaries()
        if found is None:
            raise DatabaseUnavailableError(
                "no PostgreSQL server binaries (pg_ctl, initdb) found",
                hint="install the postgresql package (Debian: /usr/lib/postgresql/N/bin)",
            )
        self.bin = found
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ujobs-cluster-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.user = self._service_user()
        self.running = False

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres?connect_timeout=5"

    # ------------------------------------------------------------------ lifecycle

    def create(self) -> PrivateCluster:
        """``initdb`` and start. Idempotent for a running cluster."""
        if self.running:
            return self
        if self.user is not None:
            shutil.chown(self.dir, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        return self

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w",
                  "-t", str(TIMEOUT_S), "start")  # fmt: skip
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """``mode``: ``smart``, ``fast`` (clients are disconnected) or ``immediate`` (a crash:
        the next start runs recovery)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", str(TIMEOUT_S), "stop")
        self.running = False

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def close(self) -> None:
        """Stop the server (immediately) and remove its directory. Idempotent."""
        if self.running:
            with contextlib.suppress(subprocess.CalledProcessError):
                self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def server_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def __enter__(self) -> PrivateCluster:
        try:
            return self.create()
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

    # ------------------------------------------------------------------ processes

    @staticmethod
    def _service_user() -> str | None:
        """``None`` when not root (run as ourselves); else a user Postgres agrees to run as."""
        if os.geteuid() != 0:
            return None
        for name in ("postgres", SERVICE_USER):
            if _user_exists(name):
                return name
        subprocess.run(
            [
                shutil.which("useradd") or "/usr/sbin/useradd",
                "--system",
                "--no-create-home",
                SERVICE_USER,
            ],
            check=True,
            capture_output=True,
            timeout=TIMEOUT_S,
        )
        return SERVICE_USER

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin / program), *args]
        if self.user is not None:
            runuser = shutil.which("runuser") or "/usr/sbin/runuser"
            command = [runuser, "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S + 10)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(
                done.returncode, command, done.stdout, done.stderr + self.server_log()[-2000:]
            )


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
