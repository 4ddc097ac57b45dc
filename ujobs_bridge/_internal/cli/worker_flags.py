"""Celery's worker flags, read with their Celery meaning: one place for both worker commands.

Why it exists: deploy scripts say ``celery -A proj worker -l INFO -n w1@%h -P prefork -c 4``.
``ujobs-bridge worker`` and ``celery worker`` on a celery_compat app (which calls into
``cli.worker_serve.serve``) both accept those flags, so their parsing lives here once: log levels by
Celery's names, node names expanded as ``celery.utils.nodenames.host_format`` does (``%h``,
``%n``, ``%d``; a name without ``@`` gets the app's prefix: ``ujobs@``, or ``celery@`` for a
Celery app), pools mapped onto ours (``prefork`` is ``processes``, ``solo`` is ``threads`` with
one slot), the pidfile Celery writes and refuses while
its process lives. A flag with no meaning on the bridge is refused with the reason and what to
use instead (``refusal``), never ignored.

What it is not: Celery. Nothing here imports it; the expansion is reimplemented (a few lines).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from collections.abc import Mapping

from ujobs_bridge._internal.observe import logs
from ujobs_bridge._internal.observe.logs import LogFormat
from ujobs_bridge._internal.worker.config import DEFAULT_AUTOSCALE_KEEPALIVE_S, DEFAULT_NODE_PREFIX
from ujobs_bridge.errors import ConfigError

LOG_LEVELS: Mapping[str, int] = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "FATAL": logging.CRITICAL,
}
# -P: Celery's pool names onto ours (pool, forced concurrency or None)
POOL_MAP: Mapping[str, tuple[str, int | None]] = {
    "prefork": ("processes", None),
    "processes": ("processes", None),
    "threads": ("threads", None),
    "solo": ("threads", 1),
}
GREEN_POOLS = ("eventlet", "gevent")
POOL_NAMES = (*POOL_MAP, *GREEN_POOLS)
_FORMAT = re.compile(r"%(\w)")

# Celery's flags with no meaning on the bridge: flag -> (why, what to use instead)
REFUSED: Mapping[str, tuple[str, str]] = {
    "--purge": (
        "the worker does not discard waiting messages at start",
        "purge ready messages first with `celery -A proj purge -f` (or app.control.purge())",
    ),
}


def autoscale(value: str) -> tuple[int, int]:
    """Celery's ``--autoscale``: ``MAX,MIN`` in either order (the larger is MAX), or ``MAX``
    alone (MIN 0, which the worker's settings refuse with the fix)."""
    parts = [p.strip() for p in value.split(",")]
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
        raise ConfigError(
            f"--autoscale {value!r} is not MAX,MIN", hint="give two whole numbers, e.g. 10,2"
        )
    numbers = sorted((int(p) for p in parts), reverse=True)
    return numbers[0], numbers[1] if len(numbers) == 2 else 0


def autoscale_keepalive() -> float:
    """Seconds an autoscaled pool idles before shrinking: ``AUTOSCALE_KEEPALIVE`` (Celery's
    environment variable), default 30."""
    raw = os.environ.get("AUTOSCALE_KEEPALIVE")
    if not raw:
        return DEFAULT_AUTOSCALE_KEEPALIVE_S
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(
            f"AUTOSCALE_KEEPALIVE={raw!r} is not a number of seconds", hint="e.g. 30"
        ) from None


def refusal(flag: str) -> ConfigError:
    why, instead = REFUSED[flag]
    return ConfigError(f"{flag} is not supported: {why}", hint=instead)


def log_level(value: str | int) -> int:
    """Celery's ``-l``: a level name, any case (``fatal`` is ``critical``), or a number."""
    if isinstance(value, int):
        return value
    level = LOG_LEVELS.get(value.upper())
    if level is None:
        raise ConfigError(
            f"log level {value!r} is not known", hint=f"use one of {', '.join(LOG_LEVELS)}"
        )
    return level


def host_format(template: str, host: str | None = None, name: str | None = None) -> str:
    """``%h`` the host name, ``%n`` its first label, ``%d`` the rest (the domain), as Celery's
    ``host_format``. ``%i``/``%I`` (Celery's pool process index) are refused: a node has one
    name here."""
    host = host or socket.gethostname()
    short, _, domain = host.partition(".")
    keys = {"h": host, "n": name or short, "d": domain}

    def expand(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in keys:
            raise ConfigError(
                f"unknown format %{key} in node name {template!r}",
                hint="use %h (host), %n (host's first label) or %d (domain)",
            )
        return keys[key]

    return _FORMAT.sub(expand, template)


def node_name(value: str | None, host: str | None = None, prefix: str = DEFAULT_NODE_PREFIX) -> str:
    """Celery's ``-n`` (``default_nodename`` then ``host_format``): ``name@host`` with ``%``
    expansion; a value without ``@`` is the host (``<prefix>@value``); nothing is
    ``<prefix>@%h``. ``prefix``: the app's (``LoadedApp.node_prefix``; ``ujobs`` for the
    engine's own apps)."""
    name, at, where = (value or "").partition("@")
    if not at:
        name, where = "", name
    return host_format(f"{name or prefix}@{where or socket.gethostname()}", host=host)


def pool(value: str, concurrency: int | None) -> tuple[str, int | None]:
    """Celery's ``-P`` onto the bridge's pool and, for ``solo``, its single slot."""
    name = value.lower()
    if name in GREEN_POOLS:
        raise ConfigError(
            f"-P {value} is not supported: job bodies run in threads or processes, and a "
            "monkey-patched green pool would block the worker's own database loop",
            hint="use -P threads for I/O-bound tasks (raise -c), or -P prefork for CPU-bound ones",
        )
    if name not in POOL_MAP:
        raise ConfigError(f"pool {value!r} is not known", hint=f"use one of {', '.join(POOL_MAP)}")
    mapped, forced = POOL_MAP[name]
    if forced is not None and concurrency not in (None, forced):
        raise ConfigError(
            f"-P {value} runs one body at a time, but -c {concurrency} was given",
            hint=f"drop -c, or use -P threads -c {concurrency}",
        )
    return mapped, forced if forced is not None else concurrency


def setup_logging(level: int, logfile: str | None, log_format: LogFormat = "text") -> None:
    """Log at ``level`` to stderr, or to ``logfile`` (Celery's ``-f``) when given, as text or
    JSON lines (``--log-format``)."""
    logs.setup(level, log_format, logfile)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_pidfile(path: str | None) -> None:
    """Celery's ``--pidfile``: write this process's pid; refuse if the file names a live
    process; replace a stale one. Removed again by ``remove_pidfile`` at exit."""
    if not path:
        return
    with contextlib.suppress(FileNotFoundError, ValueError):
        with open(path) as existing:
            old = int(existing.read().strip() or "0")
        if old and old != os.getpid() and _alive(old):
            raise ConfigError(
                f"pidfile {path} names process {old}, which is still running",
                hint="stop that worker first, or give this one another --pidfile",
            )
        os.unlink(path)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(f"{os.getpid()}\n")


def remove_pidfile(path: str | None) -> None:
    if path:
        with contextlib.suppress(FileNotFoundError):
            with open(path) as f:
                if f.read().strip() != str(os.getpid()):
                    return
            os.unlink(path)
