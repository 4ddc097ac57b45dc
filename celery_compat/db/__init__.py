"""celery_compat's SQL seam: its statements (``sql/celery.sql``) and the only code that runs them.

Why it exists: the facade keeps its own tables (the message ledger, results, chord counters,
revokes, rate limits, events) and statements, next to its code rather than in the engine's, so
the engine knows nothing of Celery. Its tables are its own part of the schema, ``celery_compat``:
the numbered files in ``migrations/`` (``part.toml`` says which engine migrations they were before
the split; ``current_schema.sql`` is the shape they leave), found by the engine's runner through
the ``ujobs_bridge.schema`` entry point without importing this package, applied after the
engine's part.

What it is not: a second connection policy; connections come from the engine's client.
"""

from __future__ import annotations

from typing import LiteralString

from ujobs_bridge.ext.database import load_folder

QUERIES: dict[str, LiteralString] = load_folder(__name__)


def q(name: str) -> LiteralString:
    """The statement called ``name``; a KeyError names the missing block."""
    return QUERIES[name]
