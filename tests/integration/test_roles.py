"""Roles by duty: ``db grant --producer|--worker|--reader|--operator`` gives each role what its
duty needs and nothing else, on every part's tables (the engine's, celery_compat's, migrate's).

The database is owned by a role of its own (``public`` gives no CREATE), every duty role is
created here with a unique name and dropped at the end. A producer enqueues and reads its job by
id; a real worker process runs as the worker role; the dashboard serves pages and ``/metrics``
as the reader and acts as the operator (in-process, over real HTTP). Then each role is refused
what is not its duty, straight in SQL: a producer reads no table, no role writes the schema's
record or changes a table or function.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import CliProc
from click.testing import CliRunner
from dashboard_support import InProcessDashboard
from psycopg import sql

from conftest import ADMIN_DSN, _dsn_for, wait_for
from ujobs_bridge import Worker, WorkerConfig, connect
from ujobs_bridge._internal.cli import cli
from ujobs_bridge._internal.config import loading
from ujobs_bridge._internal.db import schema
from ujobs_bridge._internal.db.sql import q
from ujobs_bridge.errors import ErrorCode, SchemaError
from ujobs_bridge.ext.observe import Introspector
from ujobs_bridge.testing import run_until_idle
from ujobs_bridge.testing.database import dsn_as

pytestmark = pytest.mark.timeout(300)

DUTIES = ("producer", "worker", "reader", "operator", "app")


@dataclass(frozen=True)
class Cluster:
    owner: str
    owner_dsn: str
    roles: dict[str, str]  # duty -> role name
    dsns: dict[str, str]  # duty -> DSN as that role


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    tag = uuid.uuid4().hex[:8]
    name, owner = f"ujb_roles_{tag}", f"ujb_roles_owner_{tag}"
    roles = {duty: f"ujb_roles_{duty}_{tag}" for duty in DUTIES}
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        for role in (owner, *roles.values()):
            admin.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("create database {} owner {}").format(
                sql.Identifier(name), sql.Identifier(owner)
            )
        )
    with psycopg.connect(_dsn_for(name), autocommit=True) as conn:
        conn.execute("revoke create on schema public from public")
    try:
        owner_dsn = dsn_as(_dsn_for(name), owner)
        yield Cluster(
            owner,
            owner_dsn,
            roles,
            {duty: dsn_as(_dsn_for(name), role) for duty, role in roles.items()},
        )
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
            )
            for role in (*roles.values(), owner):
                admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(role)))


def grant_all(cluster: Cluster) -> None:
    """One `db grant` naming every duty (the application role bare), as the schema owner, after
    `db upgrade`."""
    schema.upgrade(cluster.owner_dsn)
    r = cluster.roles
    args = ["db", "grant", r["app"], "--dsn", cluster.owner_dsn]
    for duty in ("producer", "worker", "reader", "operator"):
        args += [f"--{duty}", r[duty]]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"granted {r['producer']} (producer)" in result.output
    assert f"granted {r['app']} (producer, worker)" in result.output


def state_of(cluster: Cluster, job_id: uuid.UUID) -> str | None:
    with psycopg.connect(cluster.owner_dsn) as conn:
        row = conn.execute("select state from x_jobs where id = %s", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def quarantined(cluster: Cluster) -> int:
    """A poison message as `migrate` would keep it (written by the owner: test data)."""
    with psycopg.connect(cluster.owner_dsn) as conn:
        row = conn.execute(
            "insert into x_migrate_quarantine (broker, queue, reason, detail, format, raw,"
            " sha256, size) values ('redis://broker', 'q', 'malformed', 'not json', 'redis',"
            " 'x', 'sha', 1) returning id"
        ).fetchone()
    assert row is not None
    return int(row[0])


def resolution_of(cluster: Cluster, entry: int) -> str | None:
    with psycopg.connect(cluster.owner_dsn) as conn:
        row = conn.execute(
            "select resolution from x_migrate_quarantine where id = %s", (entry,)
        ).fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def test_each_duty_does_its_work_as_its_own_role(cluster: Cluster, tmp_path: Path) -> None:
    from apps import basic_jobs

    grant_all(cluster)
    dsns = cluster.dsns

    # The producer enqueues (an idempotency key a live job holds answers that job's id), with
    # the relaxed send commit: a role without row privileges sends through x_jobs_insert, and
    # may still set its own transaction's synchronous_commit.
    with connect(dsns["producer"], send_commit="off") as producer:
        added = basic_jobs.add.configure(client=producer).enqueue(2, 3)
        keyed = basic_jobs.add.configure(client=producer, idempotency_key="k1", delay=3600)
        first = keyed.enqueue(1, 1)
        assert keyed.enqueue(1, 1).id == first.id
        doomed = [basic_jobs.always_fails.configure(client=producer).enqueue() for _ in range(3)]

    # A real worker process, as the worker role, claims, settles and retries them.
    worker = CliProc(
        ["worker", "-A", "apps.basic_jobs", "-Q", "basic", "--dsn", dsns["worker"]],
        tmp_path / "worker.log",
    )
    try:
        wait_for(
            lambda: (
                state_of(cluster, added.id) == "done"
                and all(state_of(cluster, d.id) == "dead" for d in doomed)
            ),
            timeout=60,
            what="the worker role's run",
        )
    finally:
        worker.term()
        assert worker.wait(60) == 0, worker.output()
        worker.close()

    # The producer reads its result by the job's id.
    record = Introspector(dsns["producer"]).get(added.id)
    assert (record.state, record.output) == ("done", 5)

    entry = quarantined(cluster)

    # The reader: every page of the read-only dashboard and /metrics; no action.
    reader = InProcessDashboard(dsns["reader"], read_only=True)
    operator = InProcessDashboard(dsns["operator"])
    reader_acting = InProcessDashboard(dsns["reader"])
    try:
        pages = (
            "/",
            "/jobs",
            "/dead",
            f"/jobs/{added.id}",
            "/scheduled",
            "/workers",
            "/quarantine",
        )
        for path in (*pages, f"/quarantine/{entry}"):
            status, body = reader.get(path)
            assert status == 200, (path, body[:300])
        status, metrics = reader.get("/metrics")
        assert status == 200
        assert "ujobs_database_up 1.0" in metrics
        assert 'ujobs_queue_jobs{queue="basic",state="dead"} 3.0' in metrics
        assert reader.http.request(f"/jobs/{doomed[0].id}/requeue", data={})[0] == 403

        # A reader behind a dashboard that offers actions is refused by the database.
        status, body = reader_acting.post(f"/jobs/{doomed[0].id}/discard", f"/jobs/{doomed[0].id}")
        assert status == 403 and "operator" in body, body
        assert state_of(cluster, doomed[0].id) == "dead"
        status, body = reader_acting.post(f"/quarantine/{entry}/discard", f"/quarantine/{entry}")
        assert status == 403 and "operator" in body, body

        # The operator discards, requeues and cancels.
        status, _ = operator.post(f"/jobs/{doomed[0].id}/discard", f"/jobs/{doomed[0].id}")
        assert status == 303 and state_of(cluster, doomed[0].id) is None
        status, _ = operator.post(f"/jobs/{doomed[1].id}/requeue", f"/jobs/{doomed[1].id}")
        assert status == 303 and state_of(cluster, doomed[1].id) == "ready"
        status, _ = operator.post(f"/jobs/{first.id}/cancel", f"/jobs/{first.id}")
        assert status == 303 and state_of(cluster, first.id) == "cancelled"
        status, _ = operator.post(f"/quarantine/{entry}/discard", f"/quarantine/{entry}")
        assert status == 303 and resolution_of(cluster, entry) == "discarded"

        # The operator's CLI steers one job by its id the same way.
        steering = Introspector(dsns["operator"])
        assert steering.cancel(doomed[1].id).state == "cancelled"
        assert steering.requeue(doomed[1].id).state == "ready"
    finally:
        for dash in (reader, operator, reader_acting):
            dash.close()


def refused(dsn: str, statement: str, *params: Any) -> bool:
    """Whether the database refuses ``statement`` to the role of ``dsn`` for want of a
    privilege (any other error fails the test)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(statement.encode(), params or None)  # type: ignore[call-overload]
        except psycopg.errors.InsufficientPrivilege:
            return True
    return False


SCHEMA_CHANGES = (
    "delete from x_schema_version",
    "update x_schema_version set name = name",
    "insert into x_schema_version (part, version, name) values ('x', 1, 'x')",
    "alter table x_jobs add column probe int",
    "drop table x_celery_tasks",
    "drop index x_jobs_created_idx",
    "alter table x_migrate_quarantine disable trigger all",
    "truncate x_jobs",
    "create trigger probe after insert on x_jobs execute function x_job_claimable_empty()",
    "alter function x_job_get(uuid) security invoker",
    "drop function x_jobs_discard_matching(text, text, text, uuid[])",
    "create table x_probe (id int)",
    "comment on table x_jobs is 'probe'",
)

JOB_TABLES = ("x_jobs", "x_job_steps", "x_job_attempts", "x_celery_results", "x_migrate_quarantine")


def test_each_duty_is_refused_everything_else(cluster: Cluster) -> None:
    grant_all(cluster)
    dsns = cluster.dsns
    with connect(dsns["producer"]) as producer:
        from apps import basic_jobs

        ref = basic_jobs.add.configure(client=producer).enqueue(1, 2)
    job_id = str(ref.id)

    # A grant would take the owner's own privileges away: refused.
    with pytest.raises(SchemaError) as owning:
        schema.grant(cluster.owner_dsn, cluster.owner, [schema.Duty.READER])
    assert owning.value.code == ErrorCode.ROLE_IS_OWNER

    # No role but the owner changes the schema or its record.
    for duty in DUTIES:
        for statement in SCHEMA_CHANGES:
            assert refused(dsns[duty], statement), (duty, statement)

    # A producer reads no table directly, writes no row, reads a job only by its id.
    for table in JOB_TABLES:
        assert refused(dsns["producer"], f"select count(*) from {table}"), table
    assert refused(dsns["producer"], "update x_jobs set state = 'done' where id = %s", job_id)
    assert refused(dsns["producer"], "delete from x_jobs where id = %s", job_id)
    assert refused(dsns["producer"], "select x_jobs_discard_matching(null, null, null, null)")
    assert refused(dsns["producer"], "select x_jobs_cancel_matching(null, null, null, null, 'x')")
    assert not refused(dsns["producer"], "select state from x_job_get(%s)", job_id)

    # A reader reads, and writes nothing; an operator steers only through the functions.
    for duty in ("reader", "operator"):
        for table in JOB_TABLES:
            assert not refused(dsns[duty], f"select count(*) from {table}"), (duty, table)
        assert refused(dsns[duty], "update x_jobs set state = 'done' where id = %s", job_id)
        assert refused(dsns[duty], "delete from x_jobs where id = %s", job_id)
        assert refused(dsns[duty], "delete from x_celery_results")
        assert refused(dsns[duty], "update x_migrate_quarantine set resolution = 'x'")
        assert refused(
            dsns[duty],
            "select x_jobs_insert(null, array[gen_random_uuid()], "
            "array['n'], array['q'], null, null, null, null, null, null, null, null, "
            "null, null, null, null)",
        )
    assert refused(dsns["reader"], "select x_jobs_discard_matching(null, null, null, null)")
    assert refused(dsns["reader"], "select x_migrate_quarantine_resolve(1, 'discarded', null)")
    assert not refused(dsns["operator"], "select x_jobs_discard_matching(null, null, null, null)")
    assert state_of(cluster, ref.id) == "ready"

    # No function a duty may call is left to PUBLIC, and each runs with a fixed search_path.
    with psycopg.connect(cluster.owner_dsn) as conn:
        loose = conn.execute(
            "select p.proname from pg_proc as p"
            " where p.pronamespace = current_schema()::regnamespace and p.prosecdef"
            " and (has_function_privilege('public', p.oid, 'execute')"
            "      or not coalesce(p.proconfig, '{}') @> array['search_path=public, pg_temp'])"
        ).fetchall()
    assert loose == []


def test_a_role_an_older_grant_made_keeps_working_through_the_upgrade(cluster: Cluster) -> None:
    # The schema as the release before the duties left it, and that release's grant.
    with psycopg.connect(cluster.owner_dsn) as conn, conn.transaction():
        conn.execute(q("schema_version_table"))
        conn.execute(q("schema_version_parts"))
        available = schema.available()
        duties = {m.part: m.version for m in available if m.name == "duties"}
        for migration in available:
            if migration.version < duties.get(migration.part, migration.version + 1):
                conn.execute(migration.sql)
                conn.execute(
                    q("schema_version_record"),
                    {"part": migration.part, "version": migration.version, "name": migration.name},
                )
        app = sql.Identifier(cluster.roles["app"])
        for (relation,) in conn.execute(
            "select relname from pg_class where relname like 'x\\_%' and relkind = 'r'"
            " and relnamespace = current_schema()::regnamespace"
        ).fetchall():
            conn.execute(
                sql.SQL("grant select, insert, update, delete on {} to {}").format(
                    sql.Identifier(relation), app
                )
            )

    upgraded = {m.label for m in schema.upgrade(cluster.owner_dsn)}
    # and what follows them
    assert {"ujobs_bridge 0023_duties", "celery_compat 0006_duties", "migrate 0002_duties"} <= (
        upgraded
    )

    # It still enqueues, reads by id and steers (the functions were granted to it) ...
    dsn = cluster.dsns["app"]
    with connect(dsn) as client:
        from apps import basic_jobs

        ref = basic_jobs.add.configure(client=client).enqueue(1, 2)
    assert Introspector(dsn).cancel(ref.id).state == "cancelled"
    # ... settles as a worker (the settle counts in x_job_failure_counts, made by 0026) ...
    with connect(dsn) as client:
        failing = basic_jobs.always_fails.configure(client=client).enqueue()
    run_until_idle(Worker(dsn, loading.load("apps.basic_jobs"), WorkerConfig(queues=("basic",))))
    assert state_of(cluster, failing.id) == "dead"
    entry = quarantined(cluster)
    assert not refused(dsn, "select x_migrate_quarantine_resolve(%s, 'discarded', null)", entry)
    assert not refused(dsn, "select count(*) from x_celery_result_get(array['k'], null)")
    # ... and loses what no duty has once `db grant` names its duties.
    schema.grant(cluster.owner_dsn, cluster.roles["app"])
    assert refused(dsn, "delete from x_schema_version")
    assert not refused(dsn, "select x_job_get(%s)", str(ref.id))


def test_a_producer_sends_celery_tasks_and_reads_their_results_by_id(cluster: Cluster) -> None:
    """A Celery app connected as a producer role sends (``.delay()``, ``apply_async``, a group,
    inside its own transaction, in a batch) and reads results (``get``, ``state``, ``info``, a
    group's ``get``, a group it saved restored by id, a chord, a PENDING message's state) through
    the functions of celery_compat's
    0006_duties; a worker role runs the tasks. The producer still reads no table directly and
    no result but by its exact key."""
    from celery import chord, group

    from apps import celery_tasks as t
    from apps.celery_harness import bound, worker
    from celery_compat import Celery, enqueue_in

    grant_all(cluster)
    dsns = cluster.dsns
    producer_app = Celery("roles_producer")
    producer_app.conf.update(task_default_queue="celery", result_expires=3600)

    # The producer knows the tasks by name only, as a web process that never imports them.
    add, fail = producer_app.signature(t.add.name), producer_app.signature(t.fail.name)
    tsum = producer_app.signature(t.tsum.name)

    t.reset()
    with (
        bound(t.app, dsns["worker"]),
        worker(t.app, dsns["worker"]),
        bound(producer_app, dsns["producer"]),
    ):
        try:
            sent = add.delay(2, 3)
            assert sent.get(timeout=60) == 5
            assert (sent.state, sent.info, sent.successful()) == ("SUCCESS", 5, True)
            failed = fail.apply_async(("no luck",))
            assert failed.get(timeout=60, propagate=False) is not None
            assert failed.state == "FAILURE" and isinstance(failed.info, ValueError)
            assert str(failed.info) == "no luck"
            parts = group(add.clone((1, 1)), add.clone((2, 2)), add.clone((3, 3))).delay()
            assert parts.get(timeout=60) == [2, 4, 6]
            parts.save()  # kept by its id, and read back by it
            restored = producer_app.GroupResult.restore(parts.id)
            assert restored is not None and restored.get(timeout=60) == [2, 4, 6]
            joined = chord([add.clone((1, 1)), add.clone((2, 2))])(tsum)
            assert joined.get(timeout=60) == 6
            # A message no worker consumes: its state is read from its job row, by task id.
            waiting = add.apply_async((1, 2), queue="nobody")
            assert waiting.state == "PENDING"
            with psycopg.connect(dsns["producer"]) as conn:
                with enqueue_in(conn):
                    inside = add.delay(5, 5)
                with enqueue_in(conn, batch=True):
                    batched = [add.delay(i, i) for i in range(3)]
                conn.commit()
            assert inside.get(timeout=60) == 10
            assert [r.get(timeout=60) for r in batched] == [0, 2, 4]
        finally:
            producer_app.backend.close()

    producer = dsns["producer"]
    for table in ("x_celery_results", "x_celery_tasks", "x_celery_revoked", "x_jobs"):
        assert refused(producer, f"select count(*) from {table}"), table
    assert refused(producer, "delete from x_celery_results")
    # A task's result cannot be forged, nor a saved group replaced.
    with psycopg.connect(producer, autocommit=True) as conn:
        save = "select count(*) from x_celery_group_save(%s, 'forged', null, null)"
        assert conn.execute(save, (f"celery-task-meta-{sent.id}",)).fetchone() == (0,)
        assert conn.execute(save, (f"celery-taskset-meta-{parts.id}",)).fetchone() == (0,)
    key = f"celery-task-meta-{sent.id}"
    with psycopg.connect(producer, autocommit=True) as conn:
        by_key = "select count(*) from x_celery_result_get(%s, null)"
        assert conn.execute(by_key, ([key],)).fetchone() == (1,)
        assert conn.execute(by_key, (["celery-task-meta-%"],)).fetchone() == (0,)
