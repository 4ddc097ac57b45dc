"""What one dashboard serves and how it is guarded, fixed when it starts.

Why it exists: the app, its pages and its tests need the same settings object, built by the
``dashboard`` command from its flags (or directly by a test), instead of globals.

What it is not: the parsing of flags (``cli/dashboard.py``).
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass, field

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.scheduling.task import PeriodicTask

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
# A dashboard session ends after 30 minutes without a request, and 12 hours after it began
# (OWASP ASVS's level-2 session limits).
SESSION_IDLE_S = 30 * 60.0
SESSION_MAX_AGE_S = 12 * 3600.0
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 (names, not a bind)


def host_name(host_header: str) -> str:
    """The host of a ``Host`` header, an origin's netloc or an ``--allowed-host``, without its
    port, lower case (``[::1]:9210`` -> ``::1``)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def default_allowed_hosts(address: str, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The hosts a request may name: the localhost names, the bound address (for a wildcard
    bind, this machine's host name instead), and each ``--allowed-host``."""
    hosts = set(LOCAL_HOSTS)
    if address.strip().lower() in WILDCARD_BINDS:
        hosts.add(socket.gethostname().lower())
    else:
        hosts.add(host_name(address))
    hosts.update(host_name(h) for h in extra if h.strip())
    return frozenset(hosts)


@dataclass(frozen=True)
class DashboardConfig:
    """``credentials``: (user, password) required on every request, or None (local only).
    ``token``: accepted as the password of any user, or as ``Authorization: Bearer``.
    ``secret``: keys the CSRF tokens (random per process unless given).
    ``allowed_hosts``: the host names a request's ``Host`` may carry (``*``: any).
    ``session_idle_s``/``session_max_age_s``: a session ends after this long without a request,
    and this long after it began (``--session-idle``, ``--session-max-age``)."""

    dsn: str
    url_prefix: str = ""
    read_only: bool = False
    credentials: tuple[str, str] | None = None
    token: str | None = None
    tasks: dict[str, PeriodicTask] = field(default_factory=dict)
    app_spec: str | None = None  # ``-A``: what plugin panels may load (migrate's retry)
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    clock: Clock = SYSTEM_CLOCK
    page_size: int = 50
    allowed_hosts: frozenset[str] = LOCAL_HOSTS
    session_idle_s: float = SESSION_IDLE_S
    session_max_age_s: float = SESSION_MAX_AGE_S

    @property
    def guarded(self) -> bool:
        return self.credentials is not None or self.token is not None
