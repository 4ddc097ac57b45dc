"""The engine's plugin seam: what packages above it contribute, found by entry-point group.

Why it exists: the engine must not import ``celery_compat`` or ``migrate`` (they build on it), yet
its CLI lists their commands (and its demo runs their parts), its ``-A`` resolves their apps and
its retention sweep deletes their rows. Each such contribution is declared in the contributing package's ``pyproject.toml`` under
one of the groups below and loaded here by name from package metadata, which the operator
installed: never from a database row or a message.

    ujobs_bridge.cli        command name -> a ``click.Command``
    ujobs_bridge.loaders    module name  -> a ``Loader`` (how ``-A`` reads apps of that module's
                            framework, consulted only once that module is imported; loading.py)
    ujobs_bridge.retention  target name  -> a callable returning ``PurgeTarget``s
    ujobs_bridge.demo       part name    -> a demo part ``ujobs-bridge demo`` runs after its own
    ujobs_bridge.lookup     id kind      -> ``(conn, text) -> list[UUID]``: the jobs another id
                            names (a Celery task id), for ``jobs show`` and the dashboard
    ujobs_bridge.metrics    name         -> ``(conn) -> Prometheus metric families`` read from
                            the jobs database at scrape time (``metrics_db.py``)
    ujobs_bridge.dashboard  name         -> a factory of a dashboard ``Panel`` (pages of its own,
                            sections on a job's page; ``dashboard/panels.py``)
    ujobs_bridge.schema     part name    -> a ``db.schema.MigrationSet``: that package's own
                            numbered migrations, applied after the engine's (``db/schema.py``)

What it is not: a registry filled by import side effects. Nothing registers itself; a package is
in or out by its installed metadata, and an entry that fails to load is reported, not hidden.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib import metadata
from typing import Any

log = logging.getLogger("ujobs.plugins")

CLI_GROUP = "ujobs_bridge.cli"
LOADER_GROUP = "ujobs_bridge.loaders"
RETENTION_GROUP = "ujobs_bridge.retention"
DEMO_GROUP = "ujobs_bridge.demo"
LOOKUP_GROUP = "ujobs_bridge.lookup"
METRICS_GROUP = "ujobs_bridge.metrics"
DASHBOARD_GROUP = "ujobs_bridge.dashboard"
SCHEMA_GROUP = "ujobs_bridge.schema"


def entries(group: str) -> list[metadata.EntryPoint]:
    """The installed entry points of ``group``, sorted by name (a stable order)."""
    return sorted(metadata.entry_points(group=group), key=lambda e: e.name)


def find(group: str, name: str) -> metadata.EntryPoint | None:
    for entry in entries(group):
        if entry.name == name:
            return entry
    return None


def load_one(group: str, entry: metadata.EntryPoint) -> Any | None:
    """``entry`` loaded; ``None`` (logged) if its package cannot be imported (its optional
    dependencies are missing), so one missing package never stops the others."""
    try:
        return entry.load()
    except ImportError as exc:
        log.warning("ujobs.plugins.unavailable: %s %s (%s)", group, entry.name, exc)
        return None


def load_all(group: str) -> Iterator[tuple[str, Any]]:
    """Each entry of ``group`` that could be loaded (see ``load_one``)."""
    for entry in entries(group):
        loaded = load_one(group, entry)
        if loaded is not None:
            yield entry.name, loaded
