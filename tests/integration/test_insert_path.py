"""Job rows are inserted by the ``x_jobs_insert`` function (migration 0008 and its successors) and,
one at a time on a connection of the sender's own, by the same insert written as one plain
statement: ``celery_enqueue`` for a Celery message, ``job_enqueue_one`` for an engine enqueue (a
one-by-one send is a round trip and a durable commit, and the function call is work it need
not pay). They write the same columns with the same values, which the column-by-column
comparisons below hold them to: a Celery message for a revoked task id is born ``cancelled``
with ``finished_at`` and ``last_error`` whichever path wrote it, and the retention purge deletes
it like any finished job."""

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


def test_only_the_insert_function_and_the_one_row_sends_insert_job_rows() -> None:
    """A job row's column list is written in x_jobs_insert (0012 replaces it with the same insert,
    which now also wakes the workers; 0017 gives it a single-row branch with the same columns;
    0021 wakes only waiting workers, 0025 one per job), in celery_enqueue and in job_enqueue_one,
    held to it by the tests below; no other statement inserts into x_jobs."""
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
        "ujobs_bridge/_internal/db/sql/jobs.sql",
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


# An engine job's row: every column but its own id and those the clock sets (compared below as
# relations: due after its delay, at the run_at given, expiring relative to that or at an
# instant).
_ENGINE_SAME = (
    "select j.tenant_id,"
    "       to_jsonb(j) - array['id', 'tenant_id', 'created_at', 'updated_at', 'run_at',"
    "                           'expires_at'],"
    "       j.run_at - j.created_at, j.run_at, j.expires_at - j.run_at, j.expires_at"
    "  from x_jobs j"
)


def test_an_engine_job_enqueued_alone_is_the_row_the_insert_function_writes(
    dsn: str, client: Any
) -> None:
    """``job_enqueue_one`` (a client's one-by-one enqueue, one plain statement) writes what
    ``x_jobs_insert`` writes for the same call (``enqueue_many``, and an enqueue in the
    caller's transaction), column by column: due now, after a delay or at ``run_at``, expiring
    relative to that, with its key, priority, queue, tenant, trace context and enqueuer."""
    from apps import basic_jobs

    run_at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    shapes = {
        "plain": {},
        "full": dict(
            run_at=run_at, priority=-7, queue="other", expires=90.0, enqueued_by="me",
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        "keyed": dict(idempotency_key="key-", delay=3600, expires=run_at + timedelta(days=1)),
    }  # fmt: skip

    def options(shape: str, path: str) -> dict[str, Any]:
        given = dict(shapes[shape], tenant_id=f"{shape}-{path}")
        if "idempotency_key" in given:
            given["idempotency_key"] = f"key-{path}"
        return given

    for shape in shapes:
        basic_jobs.add.configure(client=client, **options(shape, "one")).enqueue(1, 2)
        client.enqueue_many([basic_jobs.add.configure(**options(shape, "many")).call(1, 2)])
        with psycopg.connect(dsn) as conn:
            basic_jobs.add.configure(conn=conn, **options(shape, "conn")).enqueue(1, 2)
    with psycopg.connect(dsn) as conn:
        found = {row[0]: row[1:] for row in conn.execute(_ENGINE_SAME).fetchall()}
    assert len(found) == 9
    for shape in shapes:
        one, many, joined = (found[f"{shape}-{p}"] for p in ("one", "many", "conn"))
        for key in ("idempotency_key", "live_key"):  # the key differs by path, by design
            for row in (one, many, joined):
                row[0][key] = row[0][key] and row[0][key].rsplit("-", 1)[0]
        assert one[0] == many[0] == joined[0], shape
        if shape != "full":  # due after its delay, counted from its creation
            assert one[1] == many[1] == joined[1], shape
        if shape != "keyed":  # expiring relative to when it is due
            assert one[3] == many[3] == joined[3], shape
    plain, full, keyed = (found[f"{shape}-one"] for shape in shapes)
    assert plain[1] == timedelta(0) and plain[3] is None and plain[0]["state"] == "ready"
    assert full[2] == run_at and full[3] == timedelta(seconds=90)
    assert full[0]["priority"] == -7 and full[0]["queue"] == "other"
    assert keyed[1] == timedelta(hours=1) and keyed[0]["idempotency_key"] == "key"
    assert {found[f"keyed-{p}"][4] for p in ("one", "many", "conn")} == {run_at + timedelta(1)}


def test_an_engine_job_enqueued_alone_wakes_one_waiting_worker(dsn: str, client: Any) -> None:
    """``job_enqueue_one`` wakes as ``x_jobs_insert`` does (0025): one ready job notifies one
    worker that marked its queue, on that worker's own channel; a queue nobody waits for sends
    nothing."""
    from apps import basic_jobs

    with psycopg.connect(dsn, autocommit=True) as db:
        channels = [session.wake_channel(token) for token in ("e1", "e2")]
        for index, channel in enumerate(channels):
            node = nodes.NodeSpec(
                worker_id=f"h:{index}:e", name=f"w{index}@h", hostname="h", pid=index,
                queues=["basic"], concurrency=1, pool="threads", info={},
            )  # fmt: skip
            nodes.node_register(db, node, 30.0, None)
            session.listen_for_wake(db, channel)
            nodes.queue_waiting_mark(db, node.worker_id, ["basic"], None, channel)
        basic_jobs.add.configure(client=client, queue="other").enqueue(1, 2)  # nobody waits
        basic_jobs.add.configure(client=client).enqueue(1, 2)
        woken = [(n.channel, n.payload) for n in db.notifies(timeout=10, stop_after=1)]
        assert len(woken) == 1 and woken[0][0] in channels and woken[0][1] == "basic"
        assert list(db.notifies(timeout=0.5)) == []  # one job, one wake-up
        for index in range(2):
            nodes.node_delete(db, f"h:{index}:e")
