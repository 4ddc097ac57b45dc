"""What Celery's Mingle step tells a worker as it starts: another live worker has its node name.

Why it exists: a Celery worker starting with the name of one already running hears two replies
from that name to its ``hello`` and warns with Celery's ``DuplicateNodenameWarning`` ("Please
make sure you give each node a unique nodename..."), from ``celery.app.control.flatten_reply``.
Two bridge workers with one name would otherwise start in silence, and every reply addressed to
that name (``inspect``, ``control``) would then mix them. Here the live nodes are read from the
engine's presence rows, and the replies Celery would have heard are handed to Celery's own
``flatten_reply``, so the warning is Celery's, word for word. ``--without-mingle`` skips it, as
in Celery.

It runs as the worker starts, before its own presence row exists, on a connection of its own
that is closed at once: a worker at rest holds no connection for it.

What it is not: a refusal. Celery starts the second worker all the same, and so does this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery.app.control import flatten_reply

from ujobs_bridge.ext.control import nodes_live
from ujobs_bridge.ext.database import Role, connect

MINGLE = Role("mingle")


def warn_if_name_taken(dsn: str, node: str, options: Mapping[str, Any]) -> None:
    """Warn as Celery's Mingle step does when a live worker is already ``node`` (called before
    this worker's own presence row is written)."""
    if options.get("without_mingle"):
        return
    with connect(dsn, MINGLE) as conn:
        named = [n for n in nodes_live(conn, None) if n.name == node]
    if named:  # the other's reply, and this worker's own
        flatten_reply([{node: None} for _ in range(len(named) + 1)])
