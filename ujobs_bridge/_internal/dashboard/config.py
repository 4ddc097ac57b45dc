"""What one dashboard serves and how it is guarded, fixed when it starts.

Why it exists: the app, its pages and its tests need the same settings object, built by the
``dashboard`` command from its flags (or directly by a test), instead of globals.

What it is not: the parsing of flags (``cli/dashboard.py``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.scheduling.task import PeriodicTask


@dataclass(frozen=True)
class DashboardConfig:
    """``credentials``: (user, password) required on every request, or None (local only).
    ``token``: accepted as the password of any user, or as ``Authorization: Bearer``.
    ``secret``: keys the CSRF tokens (random per process unless given)."""

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

    @property
    def guarded(self) -> bool:
        return self.credentials is not None or self.token is not None
