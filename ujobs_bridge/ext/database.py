"""The database as an upper package reaches it: the one connection policy (``connect`` with a
``Role``, ``Reconnecting``, ``Backoff``, ``retrying``, ``transient``,
``connection_state``), statements run directly
through libpq, binary arrays, SQL files, ids, DSNs and the schema check.

What it is not: the engine's own statements; an upper package keeps its SQL in its own ``db``.
"""

from __future__ import annotations

from ujobs_bridge._internal.config.dsn import ResolvedDatabase, mask_dsn, scrub
from ujobs_bridge._internal.config.schema_access import ensure_schema
from ujobs_bridge._internal.db.arrays import column as array_column
from ujobs_bridge._internal.db.arrays import register as register_arrays
from ujobs_bridge._internal.db.connections import (
    Backoff,
    Conn,
    Reconnecting,
    Role,
    connect,
    connection_state,
    listen_dsn,
    retrying,
    transient,
)
from ujobs_bridge._internal.db.direct import DirectStatement
from ujobs_bridge._internal.db.sql import load_folder

__all__ = [
    "Backoff",
    "Conn",
    "DirectStatement",
    "Reconnecting",
    "ResolvedDatabase",
    "Role",
    "array_column",
    "connect",
    "connection_state",
    "ensure_schema",
    "listen_dsn",
    "load_folder",
    "mask_dsn",
    "register_arrays",
    "retrying",
    "scrub",
    "transient",
]
