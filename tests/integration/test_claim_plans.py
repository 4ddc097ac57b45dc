"""A burst arriving at a queue at rest: each claim reads about its batch, not the whole queue.

Why it exists: the claim picks the head of a queue from ``x_job_claimable`` in claim order, which
its index gives directly, so a claim of ten reads about ten entries. The planner chooses that
plan only when it knows the table holds many rows: analyzed while the queue was at rest, the
table is empty as far as it knows, so for a burst it planned to read every ready job by bitmap
and sort them, on every claim, until autovacuum analyzed the table again (a burst drained slower
the larger it was). The worker's claims and settles run under ``tx_claim_plans`` (index scans
only, for their own transaction), which these tests pin through the server's own counters of
the tuples read from the claim table.

What it is not: a timing test (the bench's drain cells measure the rates).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from conftest import wait_for
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db import enqueue as enqueue_db
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge.records import ClaimedJob

Db = psycopg.Connection[Any]
QUEUE = "burst"
NAME = "tests.burst.job"
BURST = 3_000
BATCH = 10


def _reads(db: Db) -> tuple[int, int]:
    """(tuples read, scans) of ``x_job_claimable`` as the server has counted them so far: the
    rows a sequential scan read and the entries its indexes gave (bitmap or ordered)."""
    db.execute("select pg_stat_clear_snapshot()")
    row = db.execute(
        "select coalesce(t.seq_tup_read, 0)"
        "       + (select coalesce(sum(i.idx_tup_read), 0) from pg_stat_user_indexes as i"
        "           where i.relid = t.relid),"
        "       coalesce(t.seq_scan, 0) + coalesce(t.idx_scan, 0)"
        "  from pg_stat_user_tables as t where t.relname = 'x_job_claimable'"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _flushed(conn: Db) -> None:
    """Ask ``conn``'s server process to publish its counters once it is idle (it is, after
    this statement)."""
    conn.execute("select pg_stat_force_next_flush()")


def _claim(conn: Db) -> list[ClaimedJob]:
    params = leases_db.ClaimParams(
        queue=QUEUE, names=[NAME], limit=BATCH, token=uuid.uuid4(), lease_s=30, worker="burst"
    )
    return leases_db.job_claim(conn, params)


def _settle_then_claim(conn: Db) -> list[ClaimedJob]:
    params = leases_db.ClaimParams(
        queue=QUEUE, names=[NAME], limit=BATCH, token=uuid.uuid4(), lease_s=30, worker="burst"
    )
    _, claimed = leases_db.job_settle_then_claim(conn, [], params, durable=True)
    return claimed


@pytest.mark.parametrize("claim", [_claim, _settle_then_claim], ids=["claim", "settle-then-claim"])
def test_a_claim_after_a_burst_reads_its_batch_not_the_queue(
    dsn: str, db: Db, claim: Callable[[Db], list[ClaimedJob]]
) -> None:
    db.execute("vacuum analyze x_job_claimable")  # the queue at rest: empty to the planner
    specs = [
        enqueue_db.EnqueueSpec(
            id=uuid.uuid4(), name=NAME, queue=QUEUE, input_json="{}", max_attempts=3
        )
        for _ in range(BURST)
    ]
    enqueue_db.job_enqueue_many(db, specs, None)
    with connections.connect(dsn, connections.Role("test:claim-plans")) as conn:
        before_read, before_scans = _reads(db)
        claimed = claim(conn)
        _flushed(conn)
        wait_for(
            lambda: _reads(db)[1] > before_scans,
            timeout=10,
            what="the claim's scan of the claim table in the server's counters",
        )
        read = _reads(db)[0] - before_read
    assert len(claimed) == BATCH
    assert read <= 4 * BATCH, f"a claim of {BATCH} read {read} of {BURST} claimable rows"
