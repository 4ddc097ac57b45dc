"""The test kit (``ujobs_bridge.testing``) as a user of it sees it: ``perform`` runs one attempt
through the real attempt core, ``run_until_idle`` works a real worker through what is due,
``enqueued`` finds the rows, ``TemporaryDatabase`` creates, empties and drops, the pytest plugin
gives its fixtures."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from ujobs_bridge import FrozenClock, Snooze, Worker, WorkerConfig, current_job, job, step
from ujobs_bridge._internal.db import schema
from ujobs_bridge.client import Client
from ujobs_bridge.errors import DatabaseUnavailableError, JobStateError
from ujobs_bridge.records import JobState
from ujobs_bridge.testing import (
    TemporaryDatabase,
    enqueued,
    perform,
    perform_again,
    run_until_idle,
)

SIDE_EFFECTS: list[str] = []


@job(queue="kit", max_attempts=3, backoff=10, jitter=False)
def add(a: int, b: int) -> dict[str, Any]:
    ctx = current_job()
    return {"sum": a + b, "attempt": ctx.attempt}


@job(queue="kit", max_attempts=3, backoff=10, jitter=False)
def flaky(label: str) -> str:
    raise RuntimeError(f"boom {label}")


@job(queue="kit", max_attempts=3, backoff=10, jitter=False)
def charge(order: int) -> str:
    receipt = step.run("charge", lambda: SIDE_EFFECTS.append(f"charged {order}") or f"r{order}")
    if current_job().attempt == 1:
        raise RuntimeError("the mail server is down")
    return receipt


@job(queue="kit")
def later() -> None:
    raise Snooze(timedelta(minutes=5))


@job(queue="kit")
async def add_async(a: int, b: int) -> int:
    return a + b


KIT_JOBS = {d.name: d for d in (add, flaky, charge, later, add_async)}


@pytest.fixture(autouse=True)
def _clear() -> None:
    SIDE_EFFECTS.clear()


def test_perform_runs_a_succeeding_job_and_reports_its_row(frozen_client: Client) -> None:
    done = perform(add.call(2, 3), client=frozen_client)
    assert done.state is JobState.DONE
    assert done.output == {"sum": 5, "attempt": 1}
    assert done.error is None and done.attempt == 1
    assert done.job.name == add.name and done.job.claimed_by is None


def test_perform_of_a_failing_job_schedules_the_retry_and_counts_the_attempt(
    frozen_client: Client, clock: FrozenClock
) -> None:
    failed = perform(flaky.call("x"), client=frozen_client)
    assert failed.state is JobState.READY and failed.attempt == 1
    assert failed.error is not None and "RuntimeError: boom x" in failed.error
    assert failed.job.run_at == clock.now() + timedelta(seconds=10)  # the backoff, frozen time
    second = perform_again(failed, flaky, client=frozen_client)
    third = perform_again(second, flaky, client=frozen_client)
    assert (second.attempt, third.attempt, third.state) == (2, 3, JobState.DEAD)
    with pytest.raises(JobStateError, match="dead"):
        perform_again(third, flaky, client=frozen_client)


def test_perform_binds_durable_steps_so_a_retry_replays_them(frozen_client: Client) -> None:
    first = perform(charge.call(7), client=frozen_client)
    assert first.state is JobState.READY and "mail server" in (first.error or "")
    second = perform_again(first, charge, client=frozen_client)
    assert (second.state, second.output) == (JobState.DONE, "r7")
    assert SIDE_EFFECTS == ["charged 7"]  # the step ran once; the retry replayed its result


def test_perform_of_a_snooze_gives_the_attempt_back(
    frozen_client: Client, clock: FrozenClock
) -> None:
    snoozed = perform(later.call(), client=frozen_client)
    assert snoozed.state is JobState.READY and snoozed.attempt == 0
    assert snoozed.job.run_at == clock.now() + timedelta(minutes=5)
    assert "UJ_JOB_SNOOZED" in (snoozed.error or "")


def test_perform_runs_an_async_job(frozen_client: Client) -> None:
    assert perform(add_async.call(1, 2), client=frozen_client).output == 3


def test_run_until_idle_runs_what_is_due_and_leaves_what_is_not(
    dsn: str, frozen_client: Client, clock: FrozenClock
) -> None:
    frozen_client.enqueue_many([add.call(i, i) for i in range(5)] + [flaky.call("y")])
    add.configure(client=frozen_client, delay=3600).enqueue(100, 1)
    worker = Worker(dsn, KIT_JOBS, WorkerConfig(queues=("kit",)), clock=clock)
    try:
        assert run_until_idle(worker, timeout=30) == 6
        done = enqueued(frozen_client, name=add, state="done")
        assert sorted(j.output["sum"] for j in done) == [0, 2, 4, 6, 8]
        clock.advance(timedelta(seconds=10))  # flaky's retry is due, the delayed add is not
        assert run_until_idle(worker, timeout=30) == 1
        clock.advance(timedelta(hours=1))
        assert run_until_idle(worker, timeout=30) == 2  # flaky's last attempt and the delayed add
        assert run_until_idle(worker, timeout=30) == 0
    finally:
        worker.stop(timeout_s=2)
    assert [j.attempt for j in enqueued(frozen_client, name=flaky.name, state="dead")] == [3]


def test_enqueued_finds_jobs_by_name_queue_state_and_args(
    frozen_client: Client, db: psycopg.Connection[Any]
) -> None:
    add.configure(client=frozen_client).enqueue(1, 2)
    add.configure(client=frozen_client, queue="other").enqueue(3, 4)
    flaky.configure(client=frozen_client).enqueue(label="z")
    assert sorted(j.input["args"] for j in enqueued(frozen_client, name=add)) == [[1, 2], [3, 4]]
    assert len(enqueued(db, name=add, queue="other", args=[3, 4])) == 1
    assert enqueued(db, name=add, args=[9, 9]) == []
    assert len(enqueued(db, name=flaky, kwargs={"label": "z"}, state=JobState.READY)) == 1
    assert enqueued(db, state="done") == []


def test_reset_empties_every_ujobs_table_and_keeps_the_schema(
    pg_database: TemporaryDatabase, frozen_client: Client, db: psycopg.Connection[Any]
) -> None:
    perform(charge.call(1), client=frozen_client)  # a job row and a step row
    flaky.configure(client=frozen_client).enqueue("q")
    pg_database.reset()
    assert enqueued(db) == []
    assert db.execute("select count(*) from x_job_steps").fetchone() == (0,)
    assert schema.check(pg_database.dsn) == []  # the schema and its record stay
    assert perform(add.call(1, 1), client=frozen_client).state is JobState.DONE


def test_a_missing_server_names_the_admin_dsn_to_set() -> None:
    database = TemporaryDatabase("postgresql://postgres@127.0.0.1:1/postgres")
    with pytest.raises(DatabaseUnavailableError, match="UJOBS_TEST_ADMIN_DSN"):
        database.create()
    database.drop()  # nothing was created: nothing to drop


@pytest.fixture
def admin_dsn() -> str:
    from conftest import ADMIN_DSN

    return ADMIN_DSN


pytest_plugins = ["pytester"]


def test_the_pytest_plugin_gives_an_emptied_database_a_client_and_a_frozen_clock(
    pytester: pytest.Pytester, admin_dsn: str
) -> None:
    pytester.makepyfile(
        """
        from ujobs_bridge import job
        from ujobs_bridge.testing import enqueued, perform

        @job(queue="kit")
        def hello(name):
            return "hello " + name

        def test_one(ujobs_client, ujobs_clock, ujobs_database):
            with open("dbname.txt", "w") as f:
                f.write(ujobs_database.name)
            done = perform(hello.call("a"), client=ujobs_client)
            assert done.output == "hello a"
            assert done.job.run_at == ujobs_clock.now()  # the frozen clock reached SQL

        def test_two_starts_empty(ujobs_client, ujobs_dsn):
            assert enqueued(ujobs_client) == []
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "ujobs_bridge.testing.pytest", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    name = (pytester.path / "dbname.txt").read_text()
    assert name.startswith("ujobs_test_")
    with psycopg.connect(admin_dsn, autocommit=True) as admin:  # dropped when the session ended
        left = admin.execute("select count(*) from pg_database where datname = %s", (name,))
        assert left.fetchone() == (0,)


def test_the_kit_imports_without_celery_kombu_or_redis() -> None:
    blocked = "; ".join(f"sys.modules[{m!r}] = None" for m in ("celery", "kombu", "redis"))
    code = (
        f"import sys; {blocked}; import ujobs_bridge.testing, ujobs_bridge.testing.pytest; "
        "assert not any(m.startswith('celery_compat') for m in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_pgbouncer_runs_in_transaction_mode_and_lists_its_clients(dsn: str) -> None:
    """``PgBouncer``: a real bouncer on a free port in front of the server; each transaction may
    get another server session, and ``clients()`` (``pgbouncer_clients``) names who is on it."""
    from ujobs_bridge._internal.db.testing import pgbouncer_clients
    from ujobs_bridge.testing import PgBouncer

    try:
        bouncer = PgBouncer(pool_size=1)
    except DatabaseUnavailableError as exc:
        pytest.skip(str(exc))
    with bouncer:
        dbname = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
        kw: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
        with (
            psycopg.connect(bouncer.dsn(dbname), application_name="kit:a", **kw) as a,
            psycopg.connect(bouncer.dsn(dbname), application_name="kit:b", **kw) as b,
        ):
            pids = {c.execute("select pg_backend_pid()").fetchone() for c in (a, b)}
            assert len(pids) == 1  # one server session, two clients: transaction pooling
            assert sorted(bouncer.clients()) == [(dbname, "kit:a"), (dbname, "kit:b")]
            every = pgbouncer_clients(bouncer.dsn("pgbouncer"))  # the console's own included
            assert ("pgbouncer", "ujobs:testing:pgbouncer") in every and len(every) == 3
    assert not bouncer.dir.exists()
