"""Where a message goes and how often: ``enqueue_in(conn)`` joins the caller's transaction (rollback
→ no job, commit → it runs), the same message sent twice runs twice (as on Celery) while the
drainer's replay of it is absorbed, arguments keep the types
Celery's JSON carries, and tasks named in ``ujobs_broker_tasks`` are published to the real Redis
broker in protocol v2 (and never written to ``x_jobs``)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import redis
from kombu.exceptions import EncodeError

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    worker,
)
from celery_compat import Celery, enqueue_in
from celery_compat.db import message_jobs
from celery_compat.sending.message_row import from_input
from celery_compat.sending.send_keys import identity_key
from conftest import wait_for
from ujobs_bridge.testing import redis_url

REDIS_URL = redis_url(9)


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app


def test_enqueue_in_rolls_back_with_the_callers_transaction(app: Any, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        with enqueue_in(conn):
            t.add.delay(1, 2)
            assert len(jobs(dsn)) == 0  # not visible outside the open transaction
        conn.rollback()
    assert jobs(dsn) == []
    with psycopg.connect(dsn, autocommit=True) as conn:  # the ledger rolled back too: no trace
        assert conn.execute("select count(*) from x_celery_tasks").fetchone() == (0,)


def test_enqueue_in_commits_with_the_callers_transaction_and_runs(app: Any, dsn: str) -> None:
    with worker(app, dsn), psycopg.connect(dsn) as conn:
        with enqueue_in(conn):
            r = t.add.delay(20, 22)
            conn.execute("select 1")  # the caller's own work, same transaction
        assert jobs(dsn) == []
        conn.commit()
        assert r.get(timeout=10) == 42
    assert t.RAN["add"] == 1


def test_enqueue_in_batch_writes_once_at_block_exit_and_nothing_on_error(
    app: Any, dsn: str
) -> None:
    with worker(app, dsn), psycopg.connect(dsn) as conn:
        with enqueue_in(conn, batch=True):
            results = [t.add.delay(i, i) for i in range(3)]
            t.add.apply_async((0, 0), task_id=results[0].id)  # sent again: a second message
            in_tx = conn.execute("select count(*) from x_jobs").fetchone()
            assert in_tx == (0,)  # held until the block exits
        assert conn.execute("select count(*) from x_jobs").fetchone() == (4,)
        conn.commit()
        assert [r.get(timeout=10) for r in results] == [0, 2, 4]
        with pytest.raises(RuntimeError), enqueue_in(conn, batch=True):
            t.add.delay(9, 9)
            raise RuntimeError("the caller's work failed")
        conn.commit()
        wait_for(lambda: t.RAN["add"] == 4, what="both messages of the re-sent id to run")
    assert len(jobs(dsn)) == 4


def test_delays_one_by_one_each_land_also_after_the_pools_connections_were_killed(
    app: Any, dsn: str
) -> None:
    """Each ``.delay()`` outside a transaction is its own committed row, on whichever pooled
    connection (and its reused cursor) serves it, including a connection opened after the server
    killed the ones the pool held."""
    before = [t.add.delay(i, i).id for i in range(3)]
    assert len(jobs(dsn)) == 3
    with psycopg.connect(dsn, autocommit=True) as admin:
        killed = admin.execute(
            "select array_agg(pid) from pg_stat_activity where datname = current_database()"
            " and pid <> pg_backend_pid()"
        ).fetchone()
        assert killed is not None and killed[0]
        admin.execute("select pg_terminate_backend(p) from unnest(%s::int[]) as p", (killed[0],))
        wait_for(
            lambda: (
                admin.execute(
                    "select count(*) from pg_stat_activity where datname = current_database() and pid = any(%s)",
                    (killed[0],),
                ).fetchone()
                == (0,)
            ),
            what="the pool's sessions to end",
        )
    after = [t.add.delay(i, i).id for i in range(3)]
    rows = jobs(dsn)
    assert len(rows) == 6
    sent = sorted(from_input(r["input"], queue="celery").task_id for r in rows)
    assert sent == sorted(before + after)


def test_enqueue_in_refuses_what_is_not_a_psycopg3_connection() -> None:
    with pytest.raises(TypeError, match="psycopg 3 Connection"), enqueue_in(object()):  # type: ignore[arg-type]
        pass


def test_the_same_message_sent_twice_runs_twice_and_a_transport_replay_is_absorbed(
    app: Any, dsn: str
) -> None:
    first = t.add.apply_async((1, 2), task_id="order-42-confirmation")
    again = t.add.apply_async((1, 2), task_id="order-42-confirmation")
    assert first.id == again.id
    rows = jobs(dsn)
    assert len(rows) == 2  # Celery runs every message the app sends
    message = from_input(rows[0]["input"], queue="celery")
    with psycopg.connect(dsn, autocommit=True) as conn:  # the drainer's path: keyed, replayed
        assert message_jobs.enqueue(conn, message, max_attempts=3, key=identity_key(message))
        replay = from_input(rows[0]["input"], queue="celery")
        assert message_jobs.enqueue(conn, replay, max_attempts=3, key=identity_key(replay)) is None
    with worker(app, dsn):
        assert first.get(timeout=10) == 3
        wait_for(lambda: t.RAN["add"] == 3, what="the two sends and the drained copy to run")
    assert len(jobs(dsn)) == 3


def test_arguments_keep_the_types_celerys_json_carries(app: Any, dsn: str) -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    with worker(app, dsn):
        assert t.identity.delay(when).get(timeout=10) == when
        assert t.identity.delay(ident).get(timeout=10) == ident
        assert t.identity.delay(Decimal("1.25")).get(timeout=10) == Decimal("1.25")
    with pytest.raises(EncodeError):  # as Celery's json serializer refuses it at publish
        t.identity.delay(object())


def test_a_send_asking_for_pickle_is_refused_never_sent_as_json(app: Any, dsn: str) -> None:
    with pytest.raises(EncodeError, match="serializer='pickle'") as raised:
        t.identity.apply_async((1,), serializer="pickle")
    assert "UJ_PAYLOAD_NOT_JSON" in str(raised.value) and "task_serializer='json'" in str(
        raised.value
    )
    pickling = Celery("pickling", set_as_current=False)
    pickling.conf.update(task_serializer="pickle", accept_content=["pickle", "json"])

    def echo(x: Any) -> Any:
        return x

    pickled = pickling.task(name="pickling.echo", shared=False)(echo)
    with bound(pickling, dsn):
        with pytest.raises(EncodeError, match="serializer='pickle'"):
            pickled.delay(1)
        assert pickled.apply_async((2,), serializer="json")  # the call's own choice wins
    assert len(jobs(dsn)) == 1


# -- ujobs_broker_tasks: still published to the Celery broker ---------------------------------


@pytest.fixture
def broker_app(dsn: str) -> Iterator[tuple[Any, str]]:
    queue = f"ujb-test-{uuid.uuid4().hex[:10]}"
    app = Celery("broker_routing", broker=REDIS_URL, set_as_current=False)
    app.conf.update(ujobs_broker_tasks=["legacy.*"], task_default_queue=queue)

    @app.task(name="legacy.report")
    def report(n: int) -> int:
        return n

    @app.task(name="bridge.report")
    def bridged(n: int) -> int:
        return n

    r = redis.Redis.from_url(REDIS_URL)
    with bound(app, dsn):
        try:
            yield app, queue
        finally:
            for key in r.scan_iter(match=f"*{queue}*"):
                r.delete(key)
            r.close()
            app.close()


def test_broker_tasks_go_to_redis_in_protocol_v2_and_not_to_postgres(
    broker_app: tuple[Any, str], dsn: str
) -> None:
    app, queue = broker_app
    sent = app.tasks["legacy.report"].apply_async((7,), headers={"x_tenant": "acme"})
    kept = app.tasks["bridge.report"].delay(8)
    r = redis.Redis.from_url(REDIS_URL)
    try:
        raw = r.lrange(queue, 0, -1)
    finally:
        r.close()
    assert len(raw) == 1
    envelope = json.loads(raw[0])
    headers = envelope["headers"]
    assert (headers["task"], headers["id"], headers["lang"]) == ("legacy.report", sent.id, "py")
    assert (
        headers["root_id"] == sent.id and headers["retries"] == 0 and headers["x_tenant"] == "acme"
    )
    assert envelope["content-type"] == "application/json"
    assert envelope["properties"]["delivery_info"]["routing_key"] == queue
    assert envelope["properties"]["body_encoding"] == "base64"
    args, kwargs, embed = json.loads(base64.b64decode(envelope["body"]))
    assert (args, kwargs, set(embed)) == ([7], {}, {"callbacks", "errbacks", "chain", "chord"})
    # the other task went to Postgres, and only it
    assert [(j["name"], j["queue"], j["input"]["headers"]["id"]) for j in jobs(dsn)] == [
        ("bridge.report", queue, kept.id)
    ]


@pytest.mark.filterwarnings("ignore::celery.exceptions.CDeprecationWarning")  # Celery's, on queue=
def test_a_tasks_own_queue_is_where_it_is_sent_and_where_the_worker_listens(
    dsn: str, db: Any
) -> None:
    """``@app.task(queue="reports")``: Celery's ``apply_async`` routes the message there, so the
    bridge worker must consume that queue without ``-Q`` (it once listened on the default only)."""
    from celery_compat.worker.execution import jobs_for_app

    app = Celery("own_queue", set_as_current=False)
    app.conf.ujobs_database_url = dsn

    @app.task(name="own_queue.report", queue="reports", shared=False)
    def report() -> str:
        return "ok"

    @app.task(name="own_queue.plain", shared=False)
    def plain() -> str:
        return "ok"

    queues = {j.name: j.queue for j in jobs_for_app(app)}
    assert queues["own_queue.report"] == "reports" and queues["own_queue.plain"] == "celery"
    report.delay()
    assert db.execute("select queue from x_jobs where name = 'own_queue.report'").fetchone() == (
        "reports",
    )
    app.close()
