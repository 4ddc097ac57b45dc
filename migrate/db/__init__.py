"""migrate's SQL seam: its statements (``sql/migrate.sql``) and the only code that runs them.

Why it exists: the drain keeps its quarantine and its checks next to its own code; job rows go
through celery_compat's insert so a drained message and a ``.delay()`` are the same row.
Its quarantine table is its own part of the schema, ``migrate``: the numbered files in
``migrations/`` (``part.toml``: after celery_compat's part; which engine migration it was before
the split), found by the engine's runner through the ``ujobs_bridge.schema`` entry point without
importing this package; ``current_schema.sql`` is the shape they leave.

What it is not: a connection owner; the drain passes its connection in.
"""

from __future__ import annotations

from typing import LiteralString

from ujobs_bridge.ext.database import load_folder

QUERIES: dict[str, LiteralString] = load_folder(__name__)


def q(name: str) -> LiteralString:
    """The statement called ``name``; a KeyError names the missing block."""
    return QUERIES[name]
