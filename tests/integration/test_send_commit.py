"""The send commit a user chooses (``send_commit`` on a client or a call; Celery's
``ujobs_send_commit`` on the app or a call) applies to the send's own transaction only.

What is observed: ``current_setting('synchronous_commit')`` as the row's transaction commits,
recorded by a deferred row trigger this module adds to ``x_jobs`` for the test (and drops after
it), and the setting of the connection the send used once the send has returned. A send on its own transaction (a
client's or an app's pooled connection, one statement or one batch) commits at the level
chosen and leaves its connection's session as it was; a send that joins the caller's
transaction leaves that transaction's commit to the caller: a client's or app's default is not
used there, and a per-call choice is refused (``UJ_SEND_COMMIT_IN_TRANSACTION``) with nothing
written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from apps import basic_jobs
from apps import celery_tasks as t
from apps.celery_harness import bound, celery_listeners_closed  # noqa: F401
from celery_compat import enqueue_in, group
from ujobs_bridge import ConfigError, ErrorCode, connect
from ujobs_bridge.client import Client

SEEN = """
create table send_commit_seen (tenant_id text, task text, level text not null);
create function send_commit_seen() returns trigger language plpgsql as $$
begin
    insert into send_commit_seen (tenant_id, task, level)
    values (new.tenant_id, new.input -> 'headers' ->> 'id',
            current_setting('synchronous_commit'));
    return null;
end
$$;
create constraint trigger send_commit_seen after insert on x_jobs
    deferrable initially deferred for each row execute function send_commit_seen();
"""
UNSEEN = """
drop trigger if exists send_commit_seen on x_jobs;
drop function if exists send_commit_seen();
drop table if exists send_commit_seen;
"""


@pytest.fixture
def seen(db: psycopg.Connection[Any]) -> Iterator[dict[str, str]]:
    """Level each row was written at, by tenant id (engine) or Celery task id, read live."""
    db.execute(UNSEEN)
    db.execute(SEEN)

    class Seen(dict[str, str]):
        def __getitem__(self, key: str) -> str:
            row = db.execute(
                "select level from send_commit_seen where tenant_id = %s or task = %s",
                (key, key),
            ).fetchall()
            assert len(row) == 1, (key, row)
            return str(row[0][0])

    try:
        yield Seen()
    finally:
        db.execute(UNSEEN)


def session_level(client: Client) -> str:
    """The setting of the client's (one) pooled connection once its sends returned."""
    conn = client.pool.getconn()
    try:
        row = conn.execute("select current_setting('synchronous_commit')").fetchone()
        assert row is not None
        return str(row[0])
    finally:
        client.pool.putconn(conn)


def test_an_engine_send_commits_at_the_level_chosen_and_leaves_its_session_alone(
    dsn: str, seen: dict[str, str]
) -> None:
    add = basic_jobs.add
    with connect(dsn, upgrade=False, max_size=1, send_commit="off") as relaxed:
        add.configure(client=relaxed, tenant_id="client-off").enqueue(1, 2)
        add.configure(client=relaxed, tenant_id="call-on", send_commit="on").enqueue(1, 2)
        add.configure(client=relaxed, tenant_id="call-local", send_commit="local").enqueue(1, 2)
        relaxed.enqueue_many([add.configure(tenant_id="many-off").call(1, 2)])
        relaxed.enqueue_many(
            [add.configure(tenant_id="many-local").call(1, 2)], send_commit="local"
        )
        assert session_level(relaxed) == "on"
        relaxed._own.definer = True  # as a producer role sends: through x_jobs_insert
        add.configure(client=relaxed, tenant_id="definer-off").enqueue(1, 2)
        add.configure(client=relaxed, tenant_id="keyed", idempotency_key="k").enqueue(1, 2)
        again = add.configure(client=relaxed, idempotency_key="k").enqueue(3, 4)
        assert again.existing
        assert session_level(relaxed) == "on"
    with connect(dsn, upgrade=False, max_size=1) as default:
        add.configure(client=default, tenant_id="default").enqueue(1, 2)
        add.configure(client=default, tenant_id="default-call-off", send_commit="off").enqueue()
        assert session_level(default) == "on"
    assert seen["client-off"] == "off" and seen["call-on"] == "on"
    assert seen["call-local"] == "local"
    assert seen["many-off"] == "off" and seen["many-local"] == "local"
    assert seen["definer-off"] == "off" and seen["keyed"] == "off"
    assert seen["default"] == "on" and seen["default-call-off"] == "off"


def test_an_engine_send_on_the_callers_transaction_keeps_the_callers_commit(
    dsn: str, db: psycopg.Connection[Any], seen: dict[str, str]
) -> None:
    add = basic_jobs.add
    with connect(dsn, upgrade=False, send_commit="off") as relaxed, psycopg.connect(dsn) as conn:
        conn.execute("set local synchronous_commit = remote_write")
        add.configure(client=relaxed, conn=conn, tenant_id="joined").enqueue(1, 2)
        relaxed.enqueue_many([add.configure(tenant_id="joined-many").call(1, 2)], conn=conn)
        with pytest.raises(ConfigError) as refused:
            add.configure(conn=conn, send_commit="off")
        assert refused.value.code == ErrorCode.SEND_COMMIT_IN_TRANSACTION
        with pytest.raises(ConfigError) as refused:
            relaxed.enqueue_many([add.call(1, 2)], conn=conn, send_commit="off")
        assert refused.value.code == ErrorCode.SEND_COMMIT_IN_TRANSACTION
        level = conn.execute("select current_setting('synchronous_commit')").fetchone()
        assert level == ("remote_write",)  # the caller's own, still, and its transaction lives
        conn.commit()
    assert seen["joined"] == "remote_write" and seen["joined-many"] == "remote_write"
    count = db.execute("select count(*) from x_jobs").fetchone()
    assert count == (2,)  # the refused calls wrote nothing


@pytest.mark.parametrize("value", ["sometimes", "ON", "remote_apply", 1])
def test_a_send_commit_that_is_not_one_of_the_three_is_refused(dsn: str, value: Any) -> None:
    with pytest.raises(ConfigError) as refused:
        connect(dsn, upgrade=False, send_commit=value)
    assert refused.value.code == ErrorCode.JOB_OPTION_INVALID
    with pytest.raises(ConfigError):
        basic_jobs.add.configure(send_commit=value)


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn) as client:
        t.app.conf.ujobs_send_commit = "off"
        try:
            yield client
        finally:
            t.app.conf.ujobs_send_commit = None


def test_a_celery_send_commits_at_the_apps_or_the_calls_level_on_its_own_transaction(
    app: Client, seen: dict[str, str], db: psycopg.Connection[Any]
) -> None:
    t.add.apply_async((1, 2), task_id="app-off")
    t.add.apply_async((1, 2), task_id="call-local", ujobs_send_commit="local")
    t.add.apply_async((1, 2), task_id="call-on", ujobs_send_commit="on")
    group(t.add.s(i, i).set(task_id=f"group-{i}") for i in range(2)).apply_async()
    assert session_level(app) == "on"
    assert seen["app-off"] == "off" and seen["call-local"] == "local" and seen["call-on"] == "on"
    assert seen["group-0"] == seen["group-1"] == "off"
    stored = db.execute(
        "select count(*) from x_jobs where input::text like '%%ujobs_send_commit%%'"
    ).fetchone()
    assert stored == (0,)  # the option is the bridge's: never a message property
    with pytest.raises(ConfigError) as refused:
        t.add.apply_async((1, 2), ujobs_send_commit="sometimes")
    assert refused.value.code == ErrorCode.JOB_OPTION_INVALID


def test_a_celery_send_in_the_callers_transaction_keeps_the_callers_commit(
    app: Client, dsn: str, seen: dict[str, str], db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("set local synchronous_commit = remote_write")
        with enqueue_in(conn):
            t.add.apply_async((1, 2), task_id="joined")
            with pytest.raises(ConfigError) as refused:
                t.add.apply_async((1, 2), task_id="refused", ujobs_send_commit="off")
            assert refused.value.code == ErrorCode.SEND_COMMIT_IN_TRANSACTION
        with enqueue_in(conn, batch=True):
            t.add.apply_async((1, 2), task_id="joined-batch")
            with pytest.raises(ConfigError):
                t.add.apply_async((1, 2), task_id="refused-batch", ujobs_send_commit="local")
        level = conn.execute("select current_setting('synchronous_commit')").fetchone()
        assert level == ("remote_write",)
        conn.commit()
    assert seen["joined"] == "remote_write" and seen["joined-batch"] == "remote_write"
    count = db.execute("select count(*) from x_jobs").fetchone()
    assert count == (2,)
