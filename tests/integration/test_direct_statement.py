"""``DirectStatement`` (``ujobs_bridge/db/direct.py``) against a real server: what a one-by-one
send runs instead of psycopg's cursor. It must answer and fail exactly as the cursor would: the
same values, the same exception classes with their diagnostics, nothing written when a value is
refused, a statement the server forgot prepared again, a killed connection an infrastructure
error the pool replaces, and an interrupted wait never leaving a reply for the next user."""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from apps import celery_tasks as t
from apps.celery_harness import bound, celery_listeners_closed  # noqa: F401
from celery_compat.db import message_jobs
from celery_compat.sending.message_row import CeleryMessage
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.db.direct import DirectStatement

SLEEP = DirectStatement("test_direct_sleep", "select pg_sleep(%(s)s::float8)::text")
ECHO = DirectStatement(
    "test_direct_echo",
    "select %(a)s::text || '|' || %(b)s::uuid || '|' || %(c)s::int || '|' || %(d)s::timestamptz"
    " where %(a)s::text <> 'none'",
)

ROW = DirectStatement(
    "test_direct_row",
    "select %(b)s::uuid, %(f)s::float8 = 0.30000000000000004::float8, %(f)s::float8::text,"
    " null::text",
)


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("set timezone = 'UTC'")
        yield c


def message(
    task_id: str = "direct-1", name: str = "celery_tasks.add", queue: str = "celery"
) -> CeleryMessage:
    return CeleryMessage(
        headers={"id": task_id, "task": name, "retries": 0},
        args=[1, 2],
        kwargs={},
        embed={},
        queue=queue,
        properties={},
    )


def test_values_go_as_psycopgs_text_dumpers_write_them(conn: psycopg.Connection[Any]) -> None:
    job = uuid.uuid4()
    at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    got = ECHO.first_value(conn, {"a": "é 'x'", "b": job, "c": -7, "d": at})
    assert got == f"é 'x'|{job}|-7|2031-05-06 07:08:09.123456+00"
    assert ECHO.first_value(conn, {"a": "none", "b": job, "c": 1, "d": at}) is None  # no row
    assert ECHO.params == ["a", "b", "c", "d"]  # each name once, in order of appearance
    # A float goes as the shortest text that reads back as itself; a row's later columns come
    # back typed (uuid, boolean, text, null).
    row = ROW.first_row(conn, {"f": 0.1 + 0.2, "b": job}, 4)
    assert row == (job, True, repr(0.1 + 0.2), None)


def test_values_go_in_the_connections_client_encoding(dsn: str, db: Any) -> None:
    """A client that says ``client_encoding=LATIN1`` (``PGCLIENTENCODING``, ``options``) sends
    and reads LATIN1: a queue named with an accent is stored as the cursor would store it."""
    with psycopg.connect(dsn, autocommit=True, options="-c client_encoding=LATIN1") as latin:
        assert latin.info.encoding == "iso8859-1"
        job = uuid.uuid4()
        at = datetime(2031, 1, 2, tzinfo=UTC)
        got = ECHO.first_value(latin, {"a": "é", "b": job, "c": 1, "d": at})
        assert got.startswith(f"é|{job}|1|2031-01-02")
        message_jobs.enqueue_direct(latin, message("enc-1", queue="file-é"), max_attempts=3)
    assert db.execute("select queue from x_jobs").fetchall() == [("file-é",)]


def test_a_refused_value_writes_nothing_and_the_connection_lives_on(
    conn: psycopg.Connection[Any],
) -> None:
    with pytest.raises(psycopg.DataError, match="NUL"):
        message_jobs.enqueue_direct(conn, message(name="bad\x00name"), max_attempts=3)
    with pytest.raises(TypeError, match="bytes"):
        ECHO.first_value(conn, {"a": "x", "b": uuid.uuid4(), "c": b"1", "d": None})
    assert conn.execute("select count(*) from x_jobs").fetchone() == (0,)
    assert message_jobs.enqueue_direct(conn, message(), max_attempts=3) is not None


def test_a_statements_error_is_the_one_the_cursor_raises(conn: psycopg.Connection[Any]) -> None:
    """A check constraint (max_attempts >= 1): the same class, SQLSTATE and diagnostics through
    the cursor and directly; the connection stays at rest for the next statement."""
    with pytest.raises(psycopg.errors.CheckViolation) as by_cursor:
        message_jobs.enqueue(conn.cursor(), message("c1"), max_attempts=0)
    with pytest.raises(psycopg.errors.CheckViolation) as directly:
        message_jobs.enqueue_direct(conn, message("c2"), max_attempts=0)
    assert directly.value.sqlstate == by_cursor.value.sqlstate == "23514"
    assert directly.value.diag.constraint_name == "x_jobs_max_attempts_check"
    assert directly.value.diag.message_primary == by_cursor.value.diag.message_primary
    assert not connections.transient(directly.value)
    assert DirectStatement.usable(conn)
    assert message_jobs.enqueue_direct(conn, message("c3"), max_attempts=3) is not None


def test_a_statement_the_server_forgot_is_prepared_again(conn: psycopg.Connection[Any]) -> None:
    assert message_jobs.enqueue_direct(conn, message("p1"), max_attempts=3) is not None
    conn.execute("deallocate all")
    assert message_jobs.enqueue_direct(conn, message("p2"), max_attempts=3) is not None
    rows = conn.execute("select input -> 'headers' ->> 'id' from x_jobs order by 1").fetchall()
    assert rows == [("p1",), ("p2",)]


def test_where_it_runs(dsn: str, conn: psycopg.Connection[Any]) -> None:
    assert DirectStatement.usable(conn)
    with psycopg.connect(dsn) as in_tx:  # not autocommit: the caller's transaction
        assert not DirectStatement.usable(in_tx)
    conn.prepare_threshold = None  # PgBouncer in transaction mode (connections.Role)
    assert not DirectStatement.usable(conn)


def sleeping(
    db: psycopg.Connection[Any], conn: psycopg.Connection[Any]
) -> tuple[threading.Thread, list[BaseException]]:
    """A 30 s statement run directly on ``conn`` in a thread, returned once the server runs it;
    the list gets what ``first_value`` raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            SLEEP.first_value(conn, {"s": 30})
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    running = "select count(*) from pg_stat_activity where datname = current_database() and pid = %s and query like '%%pg_sleep%%'"
    deadline = time.monotonic() + 10
    while db.execute(running, (conn.info.backend_pid,)).fetchone() != (1,):
        assert time.monotonic() < deadline, "the statement never started"
        threading.Event().wait(0.05)
    return runner, errors


def test_a_killed_connection_is_an_infrastructure_error(
    db: psycopg.Connection[Any], conn: psycopg.Connection[Any]
) -> None:
    runner, errors = sleeping(db, conn)
    db.execute("select pg_terminate_backend(%s)", (conn.info.backend_pid,))
    runner.join(10)
    assert not runner.is_alive()
    (error,) = errors
    assert isinstance(error, psycopg.OperationalError) and connections.transient(error)
    # The pool's checkout check refuses it (libpq marks it closed once it reads the hang-up).
    deadline = time.monotonic() + 10
    while not conn.closed and not select.select([conn.fileno()], [], [], 0.05)[0]:
        assert time.monotonic() < deadline, "the server never hung up"
    with pytest.raises(psycopg.OperationalError):
        connections.check(conn)


def test_a_connection_cut_without_a_word_is_an_infrastructure_error_and_closed(
    db: psycopg.Connection[Any], conn: psycopg.Connection[Any]
) -> None:
    """A failover or a network cut: the socket ends while the statement runs, with no message
    from the server. libpq's error is psycopg's transient ``OperationalError``, and the
    connection is closed so the pool replaces it."""
    pid = conn.info.backend_pid
    runner, errors = sleeping(db, conn)
    cut = socket.socket(fileno=os.dup(conn.pgconn.socket))
    cut.shutdown(socket.SHUT_RDWR)  # the socket, not just this descriptor: both ends see it end
    cut.close()
    runner.join(10)
    assert not runner.is_alive()
    (error,) = errors
    assert isinstance(error, psycopg.OperationalError) and error.sqlstate is None
    assert connections.transient(error) and conn.closed
    db.execute("select pg_terminate_backend(%s)", (pid,))


def test_an_interrupted_wait_closes_the_connection(conn: psycopg.Connection[Any]) -> None:
    """Ctrl-C (here a signal handler's exception) while the statement runs: the reply may still
    come, so the connection is closed rather than handed to the next user with it unread."""

    class Interrupted(Exception):
        pass

    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted):
            SLEEP.first_value(conn, {"s": 30})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert conn.closed


def test_one_by_one_sends_go_direct_and_a_lost_connection_is_replaced(dsn: str) -> None:
    """``.delay()`` outside a transaction runs the direct statement on a connection of the app's
    pool (prepared there under its name); the row is the one ``celery_enqueue`` writes
    (``test_insert_path.py`` compares it with the batch insert's). A pooled connection killed
    between two sends is replaced at checkout, and the next send prepares the statement there."""
    t.reset()
    with bound(t.app, dsn), psycopg.connect(dsn, autocommit=True) as db:
        pool = t.app.ujobs_client.pool

        def prepared_in_pool() -> list[tuple[Any, ...]]:
            with pool.connection() as pooled:
                return pooled.execute(
                    "select name from pg_prepared_statements where name = 'ujobs_celery_enqueue'"
                ).fetchall()

        t.add.delay(1, 2)
        assert prepared_in_pool() == [("ujobs_celery_enqueue",)]
        others = db.execute(
            "select pid from pg_stat_activity where datname = current_database()"
            " and pid <> pg_backend_pid() and backend_type = 'client backend'"
        ).fetchall()
        for (pid,) in others:  # wait=5000: returns once the backend has gone
            db.execute("select pg_terminate_backend(%s, 5000)", (pid,))
        t.add.delay(3, 4)  # on a new connection: prepared there first
        rows = db.execute("select state from x_jobs where name = %s", (t.add.name,)).fetchall()
        assert rows == [("ready",), ("ready",)]
