"""A Postgres server of the bench's own, for the cells whose figures depend on server settings.

Why it exists: table health (dead tuples, index sizes, throughput over a million jobs) depends on
autovacuum, which is a server setting, not a database one, and the shared server may run with
it off or tuned for tests. The lean-table cell therefore starts a throw-away cluster
(``initdb`` + ``pg_ctl`` from the system's Postgres, on a free loopback port, its socket and data
in a temporary directory) with the settings the docs recommend (docs/explanation/table-health.md), or with others given in
``BENCH_LEAN_PG`` (``name=value,name=value``), and removes it afterwards. As root, the server
runs as the ``postgres`` system user (Postgres refuses to run as root).

What it is not: the shared server's manager (never touched), nor a fixture for the tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

BIN_ROOT = Path("/usr/lib/postgresql")
RUN_AS = "postgres"  # the system user the server runs as when the bench runs as root
START_TIMEOUT_S = 60


def _bin(name: str) -> str:
    versions = sorted(
        (p for p in BIN_ROOT.glob("*/bin") if (p / name).exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions:
        return str(versions[-1] / name)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found (install the postgresql server package)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(argv: list[str]) -> None:
    if os.geteuid() == 0:
        argv = ["runuser", "-u", RUN_AS, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")


def parse_settings(text: str) -> dict[str, str]:
    """``name=value,name=value`` -> dict (empty text: no settings)."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if part:
            name, _, value = part.partition("=")
            out[name.strip()] = value.strip()
    return out


@contextlib.contextmanager
def cluster(settings: Mapping[str, str]) -> Iterator[str]:
    """Start a fresh cluster with ``settings``; yield its admin DSN; always stop and remove it."""
    root = Path(tempfile.mkdtemp(prefix="ujb_bench_pg_"))
    data = root / "data"
    port = _free_port()
    options = " ".join(
        [f"-p {port}", f"-k {root}", "-c listen_addresses=127.0.0.1"]
        + [f"-c {k}={v}" for k, v in settings.items()]
    )
    started = False
    try:
        root.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(root, RUN_AS)
        _run([_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        _run([_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w",
              "start"])  # fmt: skip
        started = True
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    finally:
        if started:
            with contextlib.suppress(Exception):
                _run([_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"])
        shutil.rmtree(root, ignore_errors=True)
