"""Everything through a real PgBouncer in transaction mode: enqueue, claim and settle by a worker
process, durable steps, scheduler leader election, the outbox relay, celery_compat send and
result, and ``migrate`` from Redis; each with wake-ups from a direct LISTEN connection
(``--listen-dsn`` / ``UJOBS_LISTEN_URL``) and without one (polling).

Why it exists: transaction pooling hands each transaction whatever server session is free, so
session state (a ``SET``, startup ``options``), server-side prepared statements and LISTEN break
there, and only against the real thing. The bouncer (``ujobs_bridge.testing.PgBouncer``) runs
with a server pool of 3, so the clients of a test share server sessions: a prepared statement or
a session setting would show up as an error or leak into another client, which
``assert_no_session_state`` looks for. The processes are told they are behind a bouncer with
``--pgbouncer`` or ``UJOBS_PGBOUNCER=1``; the bouncer's own client list (``SHOW CLIENTS``) proves
their connections went through it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import CliProc

from conftest import CI, wait_for
from ujobs_bridge.errors import DatabaseUnavailableError
from ujobs_bridge.testing import redis_url
from ujobs_bridge.testing.pgbouncer import PgBouncer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

REDIS_URL = redis_url(14)
Db = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    try:
        found = PgBouncer(pool_size=3)
    except DatabaseUnavailableError as exc:
        if CI:
            raise
        pytest.skip(str(exc))
    with found:
        yield found


@dataclass(frozen=True)
class Through:
    """The test database through the bouncer (``dsn``), directly (``direct``), and whether the
    processes get a direct LISTEN connection (``listen``)."""

    dsn: str
    direct: str
    listen: bool
    bouncer: PgBouncer

    def listen_flags(self) -> list[str]:
        return ["--listen-dsn", self.direct] if self.listen else []

    def clients(self) -> list[str]:
        """The application names of the bouncer's clients now."""
        return [app for _, app in self.bouncer.clients()]


@pytest.fixture(params=["listen", "polling"])
def through(
    request: pytest.FixtureRequest, dsn: str, bouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch
) -> Through:
    monkeypatch.setenv("UJOBS_PGBOUNCER", "1")  # this process and the ones it starts
    monkeypatch.delenv("UJOBS_LISTEN_URL", raising=False)
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    return Through(bouncer.dsn(str(dbname)), dsn, request.param == "listen", bouncer)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., CliProc]]:
    started: list[CliProc] = []

    def start(args: list[str], **env: str) -> CliProc:
        proc = CliProc(args, tmp_path / f"proc{len(started)}.log", env=env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- {' '.join(proc.args[:3])} (exit {proc.proc.returncode}) ---")
        print(proc.output()[-3000:])


def bounced(through: Through) -> psycopg.Connection[Any]:
    """The test's own connection through the bouncer (no prepared statements, like ours)."""
    return psycopg.connect(through.dsn, autocommit=True, prepare_threshold=None)


def assert_no_session_state(through: Through) -> None:
    """Every server session of the bouncer's pool has the server's defaults: nothing the
    processes ran left a setting behind (three clients in a transaction each hold all three)."""
    conns = [bounced(through) for _ in range(3)]
    try:
        for conn in conns:
            conn.execute("begin")
            row = conn.execute(
                "select current_setting('synchronous_commit'),"
                " current_setting('idle_in_transaction_session_timeout'),"
                " (select count(*) from pg_prepared_statements)"
            ).fetchone()
            assert row == ("on", "0", 0), row
    finally:
        for conn in conns:
            conn.close()


def listeners(db: Db, role: str, since: Any = None) -> int:
    """Sessions of ``role`` on this database (opened at or after ``since``, when given: apps of
    earlier tests in this process may still hold theirs)."""
    row = db.execute(
        "select count(*) from pg_stat_activity where datname = current_database()"
        " and application_name like %s and (%s::timestamptz is null or backend_start >= %s)",
        (f"ujobs:{role}", since, since),
    ).fetchone()
    return int(row[0]) if row else 0


def assert_wakeups(through: Through, db: Db, role: str, since: Any = None) -> None:
    """With ``--listen-dsn`` the process LISTENs on a direct connection; without, nowhere."""
    if through.listen:
        wait_for(lambda: listeners(db, role, since) == 1, timeout=30, what=f"the {role} connection")
    else:
        assert listeners(db, role, since) == 0


def states(db: Db) -> dict[str, int]:
    rows = db.execute("select state, count(*) from x_jobs group by state").fetchall()
    return {str(state): int(n) for state, n in rows}


def worker(procs: Callable[..., CliProc], through: Through, app: str, *queue: str) -> CliProc:
    """A worker process told by its flags alone (``--pgbouncer``, ``--listen-dsn``)."""
    args = ["worker", "-A", app, *queue, "-c", "4", "--dsn", through.dsn, "--pgbouncer"]
    proc = procs([*args, *through.listen_flags()], UJOBS_PGBOUNCER="")
    wait_for(lambda: " ready:" in proc.output(), timeout=60, what="the worker to start")
    return proc


# ---------------------------------------------------------------------- the engine


def test_enqueue_claim_and_settle(through: Through, db: Db, procs: Callable[..., CliProc]) -> None:
    from apps.budget_jobs import noop
    from ujobs_bridge import connect

    with connect(through.dsn, upgrade=False) as client:
        refs = client.enqueue_many(noop.call(i) for i in range(40))
        refs += [noop.configure(client=client).enqueue(40 + i) for i in range(10)]
    proc = worker(procs, through, "apps.budget_jobs", "-Q", "budget")
    assert_wakeups(through, db, "worker:%:listen")
    assert any(app.startswith("ujobs:worker:") for app in through.clients())
    wait_for(lambda: states(db) == {"done": 50}, timeout=60, what="the jobs to be done")
    with connect(through.dsn, upgrade=False) as client:  # once it is idle: woken or polled
        late = noop.configure(client=client).enqueue(99)
    wait_for(lambda: states(db) == {"done": 51}, timeout=30, what="the late job")
    outputs = dict(db.execute("select id, (output #>> '{}')::int from x_jobs").fetchall())
    assert [outputs[r.id] for r in refs] == list(range(50)) and outputs[late.id] == 99
    assert "prepared statement" not in proc.output()
    assert_no_session_state(through)


def test_durable_steps(through: Through, db: Db, procs: Callable[..., CliProc]) -> None:
    from apps.budget_jobs import stepped
    from ujobs_bridge import connect

    with connect(through.dsn, upgrade=False) as client:
        refs = client.enqueue_many(stepped.call(i) for i in range(12))
    worker(procs, through, "apps.budget_jobs", "-Q", "budget")
    wait_for(lambda: states(db) == {"done": 12}, timeout=60, what="the stepped jobs")
    outputs = dict(db.execute("select id, output from x_jobs").fetchall())
    assert [outputs[r.id] for r in refs] == [[2 * i, 4 * i] for i in range(12)]
    steps = db.execute("select count(*), count(distinct (run_id, name)) from x_job_steps")
    assert steps.fetchone() == (24, 24)
    assert_no_session_state(through)


def test_scheduler_leader_election(through: Through, db: Db, procs: Callable[..., CliProc]) -> None:
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    args = ["scheduler", "-A", "apps.sched_tasks", "--no-purge", "--lease", "2", "--interval"]
    first, second = (procs([*args, "0.25", "--dsn", through.dsn]) for _ in range(2))

    def fires() -> int:
        row = db.execute("select count(*) from x_scheduler_fires").fetchone()
        return int(row[0]) if row else 0

    wait_for(lambda: fires() >= 6, timeout=60, what="fires")
    elected = [p for p in (first, second) if "ujobs.leader.elected" in p.output()]
    assert len(elected) == 1, "exactly one of the two leads"
    row = db.execute("select holder, term from x_scheduler_leader").fetchone()
    assert row is not None and int(row[0].split(":")[-2]) == elected[0].pid
    assert any(app.startswith("ujobs:scheduler:") for app in through.clients())

    elected[0].kill()  # the other one takes over once the lease runs out
    survivor = second if elected[0] is first else first
    wait_for(lambda: "ujobs.leader.elected" in survivor.output(), timeout=60, what="a new leader")
    before = fires()
    wait_for(lambda: fires() >= before + 3, timeout=60, what="fires by the new leader")
    duplicates = db.execute(
        "select count(*) from (select task, occurrence_at from x_scheduler_fires"
        " group by 1, 2 having count(*) > 1) as d"
    ).fetchone()
    jobs = db.execute(  # race-all (unkeyed) and race-skip (keyed) fire the same seconds
        "select count(*), count(distinct (input, idempotency_key is null)) from x_jobs"
    ).fetchone()
    assert duplicates == (0,) and jobs is not None and jobs[0] == jobs[1] > 0
    assert_no_session_state(through)


def test_outbox_relay(through: Through, db: Db, procs: Callable[..., CliProc]) -> None:
    from apps.outbox_jobs import deliver
    from ujobs_bridge._internal.outbox.staging import stage

    db.execute("truncate x_outbox restart identity")
    with bounced(through) as conn, conn.transaction():
        staged = [stage(conn, deliver.call(i)) for i in range(60)]
    args = ["outbox", "relay", "--dsn", through.dsn, "--interval", "0.1", "--batch", "7"]
    for _ in range(2):  # two relays: the batch's transaction-scoped lock keeps them in turn
        procs(args)

    def published() -> bool:
        row = db.execute("select count(*) from x_outbox where published_at is null").fetchone()
        return row == (0,)

    wait_for(published, timeout=60, what="the outbox to be relayed")
    made = db.execute(
        "select id, created_at from x_jobs order by (input->'args'->>0)::int, created_at"
    ).fetchall()
    assert [r[0] for r in made] == [s.job_id for s in staged]  # once each
    created = [r[1] for r in made]
    assert created == sorted(created), "a later row's job was created before an earlier row's"
    assert_no_session_state(through)


# ---------------------------------------------------------------------- celery_compat, migrate


def test_celery_compat_send_and_result(
    through: Through, db: Db, procs: Callable[..., CliProc], monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery import group

    from apps.budget_celery import add, app
    from ujobs_bridge import connect

    since = db.execute("select clock_timestamp()").fetchone()[0]  # type: ignore[index]
    if through.listen:
        monkeypatch.setenv("UJOBS_LISTEN_URL", through.direct)
    worker(procs, through, "apps.budget_celery")
    client = connect(through.dsn, upgrade=False)
    app.use_ujobs_client(client)
    try:
        assert [add.delay(i, 1).get(timeout=60) for i in range(8)] == list(range(1, 9))
        assert group(add.s(i, i) for i in range(10))().get(timeout=60) == [2 * i for i in range(10)]
        assert_wakeups(through, db, "celery:results", since)
    finally:
        app.backend.close()  # its result listener
        app.use_ujobs_client(None)
        client.close()
    assert_no_session_state(through)


def test_migrate_from_redis(through: Through, db: Db, procs: Callable[..., CliProc]) -> None:
    import migrate_support as ms
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        if CI:
            raise
        pytest.skip(f"Redis is not reachable: {exc}")
    queue = f"bouncer-mig-{uuid.uuid4().hex[:8]}"
    db.execute("truncate x_migrate_quarantine")
    try:
        with ms.producer(REDIS_URL, queue) as p:
            ids = {p.add.delay(i, i).id for i in range(400)}
        args = ["migrate", "-A", "apps.migrate_proj", "--broker", REDIS_URL, "-Q", queue]
        proc = procs([*args, "--batch", "25", "--json", "--dsn", through.dsn])
        assert proc.wait(120) == 0, proc.output()
        out = proc.output()
        report = json.loads(out[out.index("{") :])
        assert report["moved"] == 400
        task_ids = {r[0] for r in db.execute("select task_id from x_celery_tasks").fetchall()}
        assert task_ids == ids and states(db) == {"ready": 400}
    finally:
        ms.clean_redis(client, queue)
        client.close()
    assert_no_session_state(through)
