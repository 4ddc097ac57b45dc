"""A worker waiting for a queue, as the database sees it (migration 0021), for tests that listen
for the wake-up of an insert without running a worker: an insert notifies only a queue that a
registered worker node has marked as waited for."""

from __future__ import annotations

from typing import Any

import psycopg

from ujobs_bridge._internal.db import nodes

WAITER_ID = "tests:waiting"


def waiting_for(db: psycopg.Connection[Any], *queues: str, worker_id: str = WAITER_ID) -> None:
    """Register a worker node (``worker_id``) and mark ``queues`` as waited for by it."""
    spec = nodes.NodeSpec(
        worker_id=worker_id,
        name=f"waiting@{worker_id}",
        hostname="tests",
        pid=1,
        queues=list(queues),
        concurrency=1,
        pool="threads",
        info={},
    )
    nodes.node_register(db, spec, 300.0, None)
    registered, _added = nodes.queue_waiting_mark(db, worker_id, queues, None)
    assert registered
