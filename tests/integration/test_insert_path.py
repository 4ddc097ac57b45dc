"""Job rows are inserted by the ``x_jobs_insert`` function (migration 0008 and its successors) and,
for a Celery message sent one at a time, by ``celery_enqueue``, the same insert written as one
plain statement (a one-by-one ``.delay()`` is a round trip and a durable commit, and the
function call is work it need not pay). Both write the same columns with the same values, which
the column-by-column comparison below holds them to: a Celery message for a revoked task id is
born ``cancelled`` with ``finished_at`` and ``last_error`` whichever path wrote it, and the
retention purge deletes it like any finished job."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from apps import celery_tasks as t
from apps.celery_harness import bound, celery_listeners_closed  # noqa: F401
from celery_compat import enqueue_in
from ujobs_bridge._internal.db import nodes, session
from ujobs_bridge._internal.jobs.purge import run_pass

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app


def _row(conn: psycopg.Connection[Any], task_id: str) -> tuple[Any, ...]:
    row = conn.execute(
        "select j.state, j.last_error, j.finished_at is not null, j.finished_at"
        "  from x_jobs j where j.input -> 'headers' ->> 'id' = %s",
        (task_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_message_for_a_revoked_task_id_is_born_finished_and_purged(
    app: Any, dsn: str, batch: bool
) -> None:
    app.control.revoke("revoked-before-send")
    with psycopg.connect(dsn) as conn:
        with enqueue_in(conn, batch=batch):
            t.add.apply_async((1, 2), task_id="revoked-before-send")
            t.add.apply_async((3, 4), task_id="not-revoked")
        conn.commit()
        state, error, finished, finished_at = _row(conn, "revoked-before-send")
        assert (state, finished) == ("cancelled", True)
        assert error == "UJ_JOB_CANCELLED: task id was revoked"
        assert _row(conn, "not-revoked")[:3] == ("ready", None, False)
        report = run_pass(conn, finished_at + timedelta(seconds=1))
        conn.commit()
        assert report["x_jobs"] == 1
        left = conn.execute("select count(*) from x_jobs where state = 'cancelled'").fetchone()
        assert left == (0,)


def test_only_the_insert_function_and_the_one_row_celery_send_insert_job_rows() -> None:
    """A job row's column list is written in x_jobs_insert (0012 replaces it with the same insert,
    which now also wakes the workers; 0017 gives it a single-row branch with the same columns;
    0021 wakes only waiting workers, 0025 one per job) and in celery_enqueue, held to it by the test below; no
    other statement inserts into x_jobs."""
    inserting = re.compile(r"insert\s+into\s+x_jobs\b", re.IGNORECASE)
    found = sorted(
        str(path.relative_to(ROOT))
        for package in ("ujobs_bridge", "celery_compat", "migrate")
        for path in (ROOT / package).rglob("*.sql")
        if inserting.search(path.read_text(encoding="utf-8"))
        and not path.name.startswith(("0001_", "0002_", "0003_", "0004_", "0005_", "0006_"))
        and path.name != "current_schema.sql"  # generated from the migrations (db/dump.py)
    )
    assert found == [
        "celery_compat/db/sql/celery.sql",
        "ujobs_bridge/_internal/db/migrations/0008_job_insert.sql",
        "ujobs_bridge/_internal/db/migrations/0012_lean_jobs.sql",
        "ujobs_bridge/_internal/db/migrations/0017_insert_one_row.sql",
        "ujobs_bridge/_internal/db/migrations/0021_queue_waiters.sql",
        "ujobs_bridge/_internal/db/migrations/0025_wake_one.sql",
    ]


# Every column but the ones each row has of its own (id, input: the task id is in the headers)
# or takes from the clock (compared below as relations instead).
_SAME = (
    "select j.input -> 'headers' ->> 'id',"
    "       to_jsonb(j) - array['id', 'input', 'created_at', 'updated_at', 'finished_at',"
    "                           'run_at'],"
    "       j.run_at = j.created_at, j.finished_at = j.created_at, j.run_at"
    "  from x_jobs j"
)


def test_a_message_sent_alone_is_the_row_the_batch_insert_writes(app: Any, dsn: str) -> None:
    """``celery_enqueue`` (one message: the pool's autocommit send, or ``enqueue_in`` without a
    batch) and ``x_jobs_insert`` (``enqueue_in(batch=True)``) give the same message the same row,
    column by column: due now or at its eta, its priority and queue, born cancelled when its id
    was revoked."""
    eta = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    app.control.revoke("revoked-pool")
    app.control.revoke("revoked-single")
    app.control.revoke("revoked-batch")

    def send(path: str) -> None:
        t.add.apply_async((1, 2), task_id=f"plain-{path}")
        t.add.apply_async((3, 4), task_id=f"eta-{path}", eta=eta, priority=7, queue="other")
        t.fail.apply_async(task_id=f"revoked-{path}")

    send("pool")  # no caller transaction: one autocommit statement through the app's pool
    with psycopg.connect(dsn) as conn:
        with enqueue_in(conn):
            send("single")
        with enqueue_in(conn, batch=True):
            send("batch")
        conn.commit()
        found = {row[0]: row[1:] for row in conn.execute(_SAME).fetchall()}
    assert len(found) == 9
    for shape in ("plain", "eta", "revoked"):
        batch = found[f"{shape}-batch"]
        alike = batch if shape == "eta" else batch[:3]  # run_at itself: the eta, else now()
        for path in ("single", "pool"):
            row = found[f"{shape}-{path}"]
            assert (row if shape == "eta" else row[:3]) == alike, (shape, path)
    assert found["plain-batch"][0]["state"] == "ready" and found["plain-batch"][1] is True
    assert found["eta-batch"][3] == eta and found["eta-batch"][0]["priority"] == 7
    assert found["eta-batch"][0]["queue"] == "other"
    revoked = found["revoked-batch"]
    assert revoked[0]["state"] == "cancelled" and revoked[2] is True


def test_a_message_sent_alone_wakes_only_a_queue_a_worker_waits_for(app: Any, dsn: str) -> None:
    """``celery_enqueue`` notifies x_jobs_ready as ``x_jobs_insert`` does (0021): only for a
    ready message of a queue some registered worker has marked as waited for. Notifications
    arrive in commit order, so the first one to arrive is the first one sent."""
    with psycopg.connect(dsn, autocommit=True) as db:
        node = nodes.NodeSpec(
            worker_id="h:1:a", name="celery@h", hostname="h", pid=1,
            queues=["celery", "waited", "before"], concurrency=1, pool="threads", info={},
        )  # fmt: skip
        nodes.node_register(db, node, 30.0, None)
        db.execute("listen x_jobs_ready")
        t.add.apply_async((1, 1), queue="before")  # nobody waits yet
        nodes.queue_waiting_mark(db, "h:1:a", ["celery", "waited", "before"], None)
        t.add.apply_async((2, 2), queue="other")  # nobody waits for this queue
        app.control.revoke("born-cancelled")
        t.add.apply_async((3, 3), queue="waited", task_id="born-cancelled")  # not ready
        t.add.apply_async((4, 4))  # ready, on a waited queue
        first = [n.payload for n in db.notifies(timeout=10, stop_after=1)]
        assert first == ["celery"]
        nodes.node_delete(db, "h:1:a")
        nodes.node_register(db, dataclasses.replace(node, worker_id="h:2:b"), 30.0, None)
        channel = session.wake_channel("2b")  # 0025: a mark naming its worker's own channel
        session.listen_for_wake(db, channel)
        nodes.queue_waiting_mark(db, "h:2:b", ["waited"], None, channel)
        t.add.apply_async((5, 5), queue="waited")
        woken = db.notifies(timeout=10, stop_after=1)
        assert [(n.channel, n.payload) for n in woken] == [(channel, "waited")]
        nodes.node_delete(db, "h:2:b")
