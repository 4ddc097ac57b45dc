"""Database outages and poison outcomes under real worker processes: nothing lost, nothing wedged.

Why it exists: "a database restart is a non-event" only means something against a real server
that really goes away. Each test runs ``python -m ujobs_bridge worker`` processes against a
Postgres cluster of this module's own (``private_cluster``: a temporary ``initdb`` on a free
port), which the tests crash (``stop -m immediate``, then a start that runs recovery), restart
(``-m fast``) and cut (``pg_terminate_backend``); never the shared server. Bodies leave their
marks in files (``apps/outage_jobs.py``), since the database cannot keep a ledger it loses.

The faults: results finished during an outage are written when the database is back
(1); an outcome the database rejects never wedges the worker (2); after a restart, in-flight
Celery tasks read SUCCESS, step writes burn no attempt, enqueues succeed, and killed
connections fail no task (5); a Celery send retries per Celery's publish policy, then raises
kombu's ``OperationalError``, and inside the caller's transaction is not retried (6).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu.exceptions
import psycopg
import pytest
from psycopg.rows import dict_row
from worker_proc import WorkerProc

from apps import celery_outage, outage_jobs
from celery_compat import enqueue_in
from conftest import wait_for
from ujobs_bridge import connect
from ujobs_bridge._internal.db import leases as leases_db
from ujobs_bridge._internal.db import session
from ujobs_bridge.testing import PrivateCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
APP = "apps.outage_jobs"


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where bodies leave their marks and find their gates (the workers inherit the env)."""
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("UJOBS_TEST_MARKS", str(folder))
    return folder


@pytest.fixture
def workers(outage_dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(app: str, queue: str, *extra: str) -> WorkerProc:
        proc = WorkerProc(
            outage_dsn, app, queue, tmp_path / f"worker{len(started)}.log", extra=list(extra)
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- worker {proc.pid} (exit {proc.proc.returncode}) ---\n{proc.output()[-6000:]}")


def marked(marks: Path, event: str) -> list[str]:
    return sorted(p.name for p in marks.glob(f"{event}-*"))


def open_gates(marks: Path, keys: list[str]) -> None:
    for key in keys:
        (marks / f"gate-{key}").touch()


def rows(dsn: str, ids: list[Any]) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        return (
            conn.cursor(row_factory=dict_row)
            .execute(
                "select id, state, attempt, output, last_error from x_jobs where id = any(%s)",
                (ids,),
            )
            .fetchall()
        )


def by_id(dsn: str, ids: list[Any]) -> list[dict[str, Any]]:
    """The rows of ``ids``, in that order."""
    found = {r["id"]: r for r in rows(dsn, ids)}
    return [found[i] for i in ids]


def states(dsn: str, ids: list[Any]) -> set[str]:
    try:
        return {r["state"] for r in rows(dsn, ids)}
    except psycopg.OperationalError:
        return set()  # still starting up


def terminate_backends(dsn: str) -> int:
    """``pg_terminate_backend`` on every other session of the database (workers and clients),
    returning once they are gone (a kill is asynchronous)."""
    others = "from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()"
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(f"select count(pg_terminate_backend(pid)) {others}").fetchone()
        killed = conn.execute(f"select array_agg(pid) {others}").fetchone()
        wait_for(
            lambda: (
                conn.execute(
                    "select count(*) from pg_stat_activity where datname = current_database() and pid = any(%s)",
                    (killed[0] if killed else [],),
                ).fetchone()
                == (0,)
            ),
            what="the terminated sessions to end",
        )
    return int(found[0]) if found else 0


# ---------------------------------------------------------------------------------- fault 1


def test_results_finished_during_an_outage_are_written_when_the_database_is_back(
    private_cluster: PrivateCluster, outage_dsn: str, marks: Path, workers: Any
) -> None:
    """Eight one-attempt jobs finish while the server is down (crashed, then recovering) for
    longer than their leases: their results are written once it is back; none runs twice and
    none is rescued from under its own result."""
    keys = [f"f{i}" for i in range(8)]
    with connect(outage_dsn, upgrade=False) as client:
        call = outage_jobs.finish.configure(queue="outage")
        ids = [ref.id for ref in client.enqueue_many([call.call(k) for k in keys])]
    worker = workers(APP, "outage", "-c", "8", "--lease", "6")
    wait_for(lambda: len(marked(marks, "start")) == 8, timeout=60, what="eight bodies to start")

    private_cluster.stop("immediate")  # a crash: the start below runs recovery
    down = time.monotonic()
    open_gates(marks, keys)
    wait_for(lambda: len(marked(marks, "end")) == 8, timeout=30, what="the bodies to return")
    wait_for(
        lambda: "db_error" in worker.output(), timeout=30, what="the worker to meet the outage"
    )
    wait_for(
        lambda: time.monotonic() > down + 9, timeout=30, what="the outage to outlast the 6 s leases"
    )
    private_cluster.start()

    wait_for(lambda: states(outage_dsn, ids) == {"done"}, timeout=90, what="every result written")
    for row in rows(outage_dsn, ids):
        assert row["attempt"] == 1
        assert row["output"]["pid"] == worker.pid
    assert len(marked(marks, "start")) == 8  # nothing ran twice
    assert worker.proc.poll() is None
    worker.term()
    assert worker.wait(timeout=30) == 0


def test_an_outage_twice_the_lease_loses_no_result_and_runs_nothing_twice(
    private_cluster: PrivateCluster, outage_dsn: str, marks: Path, workers: Any
) -> None:
    """Two workers (``-c 8 --lease 6``) hold 160 one-attempt jobs, sixteen of them running, when
    the server crashes for 12 s; every body runs to its end during the outage. The first rescue
    sweep after the restart (run here, before the two are back: the worker that reconnects
    first) takes nothing: no lease has had its 6 s of the database being up again. The two come
    back within that time and write every result: all done, each body ran once."""
    keys = [f"q{i:03d}" for i in range(160)]
    with connect(outage_dsn, upgrade=False) as client:
        call = outage_jobs.quick.configure(queue="outage")
        ids = [ref.id for ref in client.enqueue_many([call.call(k) for k in keys])]
    pair = [workers(APP, "outage", "-c", "8", "--lease", "6") for _ in range(2)]
    wait_for(lambda: len(marked(marks, "start")) == 16, timeout=60, what="sixteen bodies to start")
    wait_for(lambda: states(outage_dsn, ids) == {"running"}, timeout=60, what="every job claimed")
    with psycopg.connect(outage_dsn, autocommit=True) as conn:
        conn.execute("checkpoint")  # every claim on disk: the crash forgets none of them

    private_cluster.stop("immediate")
    down = time.monotonic()
    open_gates(marks, ["go"])
    wait_for(lambda: len(marked(marks, "end")) == 160, timeout=60, what="every body to end")
    for worker in pair:
        worker.pause()  # neither is back before the first sweep below
    wait_for(lambda: time.monotonic() > down + 12, timeout=30, what="a 12 s outage")
    private_cluster.start()
    with psycopg.connect(outage_dsn, autocommit=True) as conn:
        rescued = leases_db.job_rescue(conn, limit=1000, error="UJ_WORKER_LOST: test", now=None)
    for worker in pair:
        worker.resume()

    wait_for(
        lambda: states(outage_dsn, ids) <= {"done", "dead", "ready"} and states(outage_dsn, ids),
        timeout=60,
        what="every outcome written",
    )
    found = by_id(outage_dsn, ids)
    assert {(r["state"], r["attempt"]) for r in found} == {("done", 1)}
    starts = marked(marks, "start")
    assert len(starts) == 160  # each body ran once
    ran_by = {name.split("-")[1]: int(name.split("-")[3]) for name in starts}
    assert [r["output"]["pid"] for r in found] == [ran_by[k] for k in keys]
    assert all("fenced" not in w.output() for w in pair)
    assert rescued == []


def test_a_worker_stopped_during_an_outage_writes_its_results_before_it_exits(
    private_cluster: PrivateCluster, outage_dsn: str, marks: Path, workers: Any
) -> None:
    """SIGTERM while the server is down, with results owed: the shutdown keeps retrying (with
    backoff, while the leases may still be valid), writes them once the server is back, and
    exits 0: no traceback, no result lost, no job dead."""
    keys = [f"t{i}" for i in range(4)]
    with connect(outage_dsn, upgrade=False) as client:
        call = outage_jobs.finish.configure(queue="outage")
        ids = [ref.id for ref in client.enqueue_many([call.call(k) for k in keys])]
    worker = workers(APP, "outage", "-c", "4", "--lease", "8", "--shutdown-timeout", "1")
    wait_for(lambda: len(marked(marks, "start")) == 4, timeout=60, what="four bodies to start")
    private_cluster.stop("fast")
    open_gates(marks, keys)
    wait_for(lambda: len(marked(marks, "end")) == 4, timeout=30, what="the bodies to return")
    seen = len(worker.output())
    worker.term()
    wait_for(
        lambda: "db_error" in worker.output()[seen:] or worker.proc.poll() is not None,
        timeout=30,
        what="the shutdown to meet the outage",
    )
    private_cluster.start()
    assert worker.wait(timeout=60) == 0
    assert "Traceback" not in worker.output()
    assert states(outage_dsn, ids) == {"done"}
    assert {row["attempt"] for row in rows(outage_dsn, ids)} == {1}


# ---------------------------------------------------------------------------------- fault 2


def test_outcomes_the_database_rejects_are_isolated_and_never_wedge_the_worker(
    outage_dsn: str, marks: Path, workers: Any
) -> None:
    """A NUL in an error message or in a result fails the batch it is in; the worker splits the
    batch until the bad item stands alone and stores it sanitized, writes the others, and goes
    on claiming; SIGTERM still ends it cleanly."""
    kinds = ["ok-1", "nul-error", "ok-2", "nul-output", "long-nul-error", "ok-3"]
    with connect(outage_dsn, upgrade=False) as client:
        call = outage_jobs.poison.configure(queue="outage")
        ids = [ref.id for ref in client.enqueue_many([call.call(k) for k in kinds])]
    worker = workers(APP, "outage", "-c", "6", "--lease", "6")
    wait_for(
        lambda: states(outage_dsn, ids) <= {"done", "dead"} and states(outage_dsn, ids) != set(),
        timeout=60,
        what="every outcome stored",
    )
    found = {kind: row for kind, row in zip(kinds, by_id(outage_dsn, ids), strict=True)}
    for kind in ("ok-1", "ok-2", "ok-3"):
        assert (found[kind]["state"], found[kind]["output"]) == ("done", kind)
    assert found["nul-output"]["state"] == "done"
    assert found["nul-output"]["output"] == {"text": "a\\u0000b", "ok": True}
    assert found["nul-error"]["state"] == "dead"
    assert "bad\\u0000byte" in found["nul-error"]["last_error"]
    long_error = found["long-nul-error"]["last_error"]
    assert found["long-nul-error"]["state"] == "dead"
    assert len(long_error) <= 33_000 and long_error.endswith("\\u0000")
    assert len(marked(marks, "start")) == len(kinds)  # each ran once

    with connect(outage_dsn, upgrade=False) as client:  # the worker still claims
        later = outage_jobs.poison.configure(client=client, queue="outage").enqueue("ok-later")
    wait_for(
        lambda: states(outage_dsn, [later.id]) == {"done"}, timeout=30, what="a later job to run"
    )
    worker.term()
    assert worker.wait(timeout=30) == 0
    assert "Traceback" not in worker.output()


# ---------------------------------------------------------------------------------- fault 5


def test_the_first_enqueues_after_a_restart_or_killed_connections_succeed(
    private_cluster: PrivateCluster, outage_dsn: str
) -> None:
    with connect(outage_dsn, upgrade=False) as client:
        call = outage_jobs.finish.configure(queue="outage")
        first = client.enqueue_spec(call.call("before").spec())
        private_cluster.restart("fast")
        after_restart = [client.enqueue_spec(call.call(f"r{i}").spec()) for i in range(4)]
        assert terminate_backends(outage_dsn) >= 1
        after_kill = [client.enqueue_spec(call.call(f"k{i}").spec()) for i in range(4)]
    ids = [ref.id for ref in [first, *after_restart, *after_kill]]
    assert states(outage_dsn, ids) == {"ready"} and len(rows(outage_dsn, ids)) == 9


def waiting_queues(dsn: str) -> list[str]:
    """The queues some worker marked as waited for (0021); none while the server starts up."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            return [r[0] for r in conn.execute("select queue from x_queue_waiters").fetchall()]
    except psycopg.OperationalError:
        return []


def test_an_idle_worker_whose_mark_was_lost_in_a_crash_is_woken_by_inserts_again(
    private_cluster: PrivateCluster, outage_dsn: str, marks: Path, workers: Any
) -> None:
    """The claim connection commits a worker's mark asynchronously (0021), so a crash may lose
    it while the worker, waiting, believes its queue marked. Once the database is back the
    worker marks the queue again (after the claim loop's error, or at its poll's re-check), and
    an insert reaches it: handed to it (0027) or, were its mark not armed, a wake-up."""
    workers(APP, "outage")
    wait_for(lambda: waiting_queues(outage_dsn) == ["outage"], timeout=60, what="its mark")
    with psycopg.connect(outage_dsn, autocommit=True) as conn:
        conn.execute("delete from x_queue_waiters")  # what the crash may take with it
    private_cluster.restart("immediate")
    wait_for(lambda: waiting_queues(outage_dsn) == ["outage"], timeout=60, what="its mark again")
    with psycopg.connect(outage_dsn, autocommit=True) as listener:
        ((channel, hand),) = listener.execute(
            "select channel, hand_channel from x_queue_waiters"
        ).fetchall()
        session.listen_for_wake(listener, channel)  # the worker's own channel (0025)
        session.listen_for_wake(listener, hand)  # and its hand-offs' (0027)
        with connect(outage_dsn, upgrade=False) as client:
            ref = client.enqueue_spec(
                outage_jobs.finish.configure(queue="outage").call("woken").spec()
            )
        reached = [n.channel for n in listener.notifies(timeout=30, stop_after=1)]
        assert reached in ([channel], [hand])
    open_gates(marks, ["woken"])
    wait_for(lambda: states(outage_dsn, [ref.id]) == {"done"}, timeout=60, what="the woken job")


def test_the_first_step_write_after_a_restart_burns_no_attempt(
    private_cluster: PrivateCluster, outage_dsn: str, marks: Path, workers: Any
) -> None:
    keys = [f"s{i}" for i in range(4)]
    with connect(outage_dsn, upgrade=False) as client:
        call = outage_jobs.stepped.configure(queue="outage")
        ids = [ref.id for ref in client.enqueue_many([call.call(k) for k in keys])]
    workers(APP, "outage", "-c", "4", "--lease", "10")
    wait_for(
        lambda: len(marked(marks, "start")) == 4,
        timeout=60,
        what="four bodies past their first step",
    )
    private_cluster.restart("fast")
    open_gates(marks, keys)
    wait_for(lambda: states(outage_dsn, ids) == {"done"}, timeout=90, what="every job done")
    for key, row in zip(keys, by_id(outage_dsn, ids), strict=True):
        assert (row["attempt"], row["output"]) == (1, f"{key}-1+{key}-2")
    assert len(marked(marks, "start")) == 4


def test_celery_tasks_in_flight_through_a_restart_read_success(
    private_cluster: PrivateCluster, outage_dsn: str, marks: Path, workers: Any
) -> None:
    """Bodies running across a ``restart -m fast`` store SUCCESS on their first try (their
    pooled connections died under them); then every backend of the database is terminated and
    the next task succeeds too."""
    app = celery_outage.app
    client = connect(outage_dsn, upgrade=False)
    app.use_ujobs_client(client)
    try:
        worker = workers("apps.celery_outage", "couts", "-c", "4", "--lease", "10")
        keys = [f"c{i}" for i in range(4)]
        results = [celery_outage.gated.delay(k, i) for i, k in enumerate(keys)]
        wait_for(lambda: len(marked(marks, "start")) == 4, timeout=60, what="four tasks to start")
        private_cluster.restart("fast")
        open_gates(marks, keys)
        assert [r.get(timeout=90) for r in results] == [0, 2, 4, 6]
        assert {r.state for r in results} == {"SUCCESS"}

        assert terminate_backends(outage_dsn) >= 1
        after = celery_outage.gated.delay("after", 5)
        open_gates(marks, ["after"])
        assert after.get(timeout=60) == 10
        assert every_row_done_at_its_first_attempt(outage_dsn)
        assert len(marked(marks, "start")) == 5
        assert worker.proc.poll() is None
    finally:
        app.use_ujobs_client(None)
        app.backend.close()
        client.close()


def test_celery_results_finished_during_an_outage_longer_than_the_lease_are_kept(
    private_cluster: PrivateCluster, outage_dsn: str, marks: Path, workers: Any
) -> None:
    """Four Celery tasks in pool children return while the server is down (crashed) for well
    over their 4 s leases: the worker signals them when it cannot renew, but neither kills the
    children nor lets their result writes give up, so every task reads SUCCESS from its one run
    and none is handed back to run again."""
    app = celery_outage.app
    client = connect(outage_dsn, upgrade=False)
    app.use_ujobs_client(client)
    try:
        worker = workers(
            "apps.celery_outage", "couts", "-c", "4", "--lease", "4", "-P", "processes"
        )
        keys = [f"long{i}" for i in range(4)]
        results = [celery_outage.gated.delay(k, i) for i, k in enumerate(keys)]
        wait_for(lambda: len(marked(marks, "start")) == 4, timeout=60, what="four tasks to start")
        with psycopg.connect(outage_dsn, autocommit=True) as conn:
            # Claims commit asynchronously: a crash right after them may forget them (the jobs
            # are then ready again and run twice, as at-least-once allows). A synchronous commit
            # flushes the WAL up to it, claims included: this test is about the results.
            conn.execute("create table if not exists wal_flushed (x int)")
        private_cluster.stop("immediate")
        try:
            down = time.monotonic()
            open_gates(marks, keys)  # they return now, into the outage
            wait_for(
                lambda: time.monotonic() > down + 10,
                timeout=60,
                what="the outage to outlast the 4 s leases",
            )
        finally:
            private_cluster.start()
        assert [r.get(timeout=90) for r in results] == [0, 2, 4, 6]
        assert every_row_done_at_its_first_attempt(outage_dsn)
        assert len(marked(marks, "start")) == 4  # nothing ran twice
        assert worker.proc.poll() is None
    finally:
        app.use_ujobs_client(None)
        app.backend.close()
        client.close()


def every_row_done_at_its_first_attempt(dsn: str) -> bool:
    """Waits until every job row is ``done``; True if none needed a second attempt."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_for(
            lambda: (
                conn.execute("select array_agg(distinct state) from x_jobs").fetchone()
                == (["done"],)
            ),
            timeout=30,
            what="every task's row done",
        )
        return conn.execute("select max(attempt) from x_jobs").fetchone() == (1,)


# ---------------------------------------------------------------------------------- fault 6


@pytest.fixture
def sending_app(outage_dsn: str) -> Iterator[tuple[Any, list[float]]]:
    """``celery_outage.app`` on the private cluster, with one task sent while it is up (the
    pool holds a connection the outage will kill), and the pauses of its publish retries
    recorded instead of slept (``BridgeAMQP.publish_pause``)."""
    app = celery_outage.app
    client = connect(outage_dsn, upgrade=False)
    app.use_ujobs_client(client)
    pauses: list[float] = []
    app.amqp.publish_pause = pauses.append
    try:
        celery_outage.gated.delay("before", 0)
        yield app, pauses
    finally:
        del app.amqp.publish_pause
        app.use_ujobs_client(None)
        client.close()


def task_rows(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute("select input->'headers'->>'id' from x_jobs")]


def test_a_send_with_the_database_stopped_is_retried_per_celerys_policy_then_raises_kombus_error(
    private_cluster: PrivateCluster, outage_dsn: str, sending_app: tuple[Any, list[float]]
) -> None:
    app, pauses = sending_app
    private_cluster.stop("fast")
    try:
        seen: list[float] = []
        errback = {"errback": lambda exc, interval: seen.append(interval)}
        began = time.monotonic()
        with pytest.raises(kombu.exceptions.OperationalError) as raised:
            celery_outage.gated.apply_async(("down", 1), retry_policy=errback)
        assert time.monotonic() - began < 15  # the pool's 30 s wait is not what decides
        assert isinstance(raised.value.__cause__, psycopg.OperationalError)
        assert "UJ_DATABASE_UNAVAILABLE" in str(raised.value) and "4 time(s)" in str(raised.value)
        assert seen == [0.0, 0.2, 0.4]  # Celery's default policy: 3 retries, 0 + 0.2 each, max 1
        assert pauses == [0.2, 0.4]

        seen.clear()
        pauses.clear()
        policy = {"max_retries": 1, "interval_start": 5, "interval_max": 5, **errback}
        with pytest.raises(kombu.exceptions.OperationalError):
            app.send_task(celery_outage.gated.name, ("policy", 1), retry_policy=policy)
        assert (seen, pauses) == ([5.0], [5.0])

        seen.clear()
        with pytest.raises(kombu.exceptions.OperationalError) as raised:
            celery_outage.gated.apply_async(("no-retry", 1), retry=False, retry_policy=errback)
        assert seen == [] and "retry=False" in str(raised.value)
    finally:
        private_cluster.start()
    assert len(task_rows(outage_dsn)) == 1  # only the task sent before the outage


def test_a_send_whose_database_comes_back_within_the_policy_is_sent_once(
    private_cluster: PrivateCluster, outage_dsn: str, sending_app: tuple[Any, list[float]]
) -> None:
    private_cluster.stop("fast")
    seen: list[float] = []

    def back_on_first_retry(exc: BaseException, interval: float) -> None:
        seen.append(interval)
        if len(seen) == 1:
            private_cluster.start()

    try:
        result = celery_outage.gated.apply_async(
            ("back", 1), retry_policy={"errback": back_on_first_retry}
        )
    finally:
        if not private_cluster.running:
            private_cluster.start()
    assert seen == [0.0]
    assert task_rows(outage_dsn).count(result.id) == 1


def test_a_send_inside_the_callers_transaction_is_not_retried(
    private_cluster: PrivateCluster, outage_dsn: str, sending_app: tuple[Any, list[float]]
) -> None:
    _, pauses = sending_app
    seen: list[float] = []
    with psycopg.connect(outage_dsn) as conn:
        conn.execute("select 1")  # the caller's transaction is open
        private_cluster.stop("fast")
        try:
            with pytest.raises(kombu.exceptions.OperationalError) as raised, enqueue_in(conn):
                celery_outage.gated.apply_async(
                    ("in-tx", 1), retry_policy={"errback": lambda e, i: seen.append(i)}
                )
        finally:
            private_cluster.start()
    assert (seen, pauses) == ([], [])
    assert "caller's transaction" in str(raised.value)
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)
