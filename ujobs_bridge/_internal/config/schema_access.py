"""Who may change the schema: runtime paths check it read-only, only the owner upgrades.

Why it exists: an application role should need row privileges and nothing more (PostgreSQL 15
gives ``public`` no CREATE by default), so producers, workers, the scheduler and ``migrate`` never
run DDL on their own: they read ``x_schema_version`` and, when migrations are missing, stop with
"run ``ujobs-bridge db upgrade`` as the schema owner". Two cases keep the old convenience of a
process that upgrades for itself: the embedded development database (this process started it and
owns it), and an explicit opt-in (``UJOBS_AUTO_UPGRADE=1``, or ``connect(upgrade=True)``).

What it is not: the migration runner (``db.schema``) or the grant itself (``db grant ROLE``).
"""

from __future__ import annotations

import os

from ujobs_bridge._internal.config.dsn import ResolvedDatabase
from ujobs_bridge._internal.db import schema

AUTO_UPGRADE_ENV = "UJOBS_AUTO_UPGRADE"
_TRUE = {"1", "true", "yes", "on"}


def auto_upgrade(database: ResolvedDatabase, asked: bool | None = None) -> bool:
    """Whether this process may apply missing migrations itself: ``asked`` when given, else
    on the embedded database or with ``UJOBS_AUTO_UPGRADE`` set to a true value."""
    if asked is not None:
        return asked
    if database.source == "embedded":
        return True
    return os.environ.get(AUTO_UPGRADE_ENV, "").strip().lower() in _TRUE


def ensure_schema(
    database: ResolvedDatabase, *, upgrade: bool | None = None
) -> list[schema.Migration]:
    """Make sure the schema is current before a runtime path uses it. Read-only unless
    ``auto_upgrade`` allows this process to upgrade; returns the migrations it applied."""
    missing = schema.check(database.dsn)
    if not missing:
        return []
    if auto_upgrade(database, upgrade):
        return schema.upgrade(database.dsn)
    # raises with the hint, naming the first missing one and the command for this database
    schema.require_current(database.dsn, database.upgrade_command)
    return []
