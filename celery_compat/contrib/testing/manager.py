"""``celery_compat.contrib.testing.manager``: Celery's own integration-test ``Manager``.

Why it exists: an import swapped from ``celery.contrib.testing.manager`` keeps working. The
bridge answers ``app.control`` over Postgres, so Celery's ``Manager`` drives a bridge worker
unmodified: this module re-exports it, and nothing else.

What it is not: a replacement manager; there is no bridge-specific logic here.
"""

from __future__ import annotations

from celery.contrib.testing.manager import (
    E_STILL_WAITING,
    Manager,
    ManagerMixin,
    Sentinel,
)

__all__ = ["E_STILL_WAITING", "Manager", "ManagerMixin", "Sentinel"]
