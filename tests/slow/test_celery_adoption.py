"""A PLAIN ``celery.Celery`` app under the bridge worker is adopted: messages drained from its
Redis broker by the real ``ujobs-bridge migrate`` run on the real ``ujobs-bridge worker``, and
everything they send next (a chain's next step, a ``link`` callback, a ``link_error`` errback, a
retry, a ``.delay()`` inside a body) goes to Postgres and runs there; results are in Postgres;
the Redis broker and result backend receive nothing. Redis db 4 is this file's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from celery import chain
from worker_proc import TESTS_DIR, WorkerProc

from apps import adopt_plain as ap
from celery_compat.adoption import adopt
from conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(ap.REDIS_URL)
    client.flushdb()  # db 4 belongs to this file
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def ran_table(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table if not exists adopt_ran (what text not null)")
        conn.execute("truncate adopt_ran")
    return dsn


def _ran(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return sorted(row[0] for row in conn.execute("select what from adopt_ran"))


def _results(dsn: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select key, value from x_celery_results").fetchall()
    prefix = "celery-task-meta-"
    return {k[len(prefix) :]: json.loads(v) for k, v in rows if k.startswith(prefix)}


def _job_rows(dsn: str) -> list[tuple[str, str]]:
    """(task id, job state) per row; a retry is a new row under the same task id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id'), j.state from x_jobs j"
        ).fetchall()
    return [(task_id, state) for task_id, state in rows]


def _broker_keys(r: redis.Redis) -> list[bytes]:
    """Everything in the broker/backend db but kombu's queue bindings (declared by publishing)."""
    return sorted(k for k in r.scan_iter() if not k.startswith(b"_kombu.binding"))


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_drained_messages_of_a_plain_app_continue_on_the_bridge(
    ran_table: str, r: redis.Redis, tmp_path: Path, pool: str
) -> None:
    dsn = ran_table
    chained = chain(ap.add.s(1, 2), ap.mul.s(10)).apply_async()
    linked = ap.add.apply_async((2, 3), link=ap.mul.s(100))
    failing = ap.boom.apply_async(("x",), link_error=ap.on_error.s())
    flaky = ap.flaky.delay(2)
    spawner = ap.spawner.delay(5)
    assert r.llen(ap.QUEUE) == 5

    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    )
    migrated = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", "migrate", "-A", "apps.adopt_plain", "--dsn", dsn,
         "-Q", ap.QUEUE, "--json"],
        env=env, cwd=TESTS_DIR, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr
    assert r.llen(ap.QUEUE) == 0 and _broker_keys(r) == []

    worker = WorkerProc(
        dsn, "apps.adopt_plain", ap.QUEUE, tmp_path / "worker.log", extra=["-P", pool, "-c", "2"]
    )
    try:
        wait_for(
            lambda: "adopted the plain celery.Celery app 'adopt_plain'" in worker.output(),
            timeout=60,
            what="the worker to say it adopted the app",
        )
        expected_runs = [
            "add(1, 2)",
            "add(2, 3)",
            "add(5, 5)",
            "boom(x)",
            "flaky(try 0)",
            "flaky(try 1)",
            "flaky(try 2)",
            "mul(3, 10)",
            "mul(5, 100)",
            f"on_error({failing.id})",
            "spawner(5)",
        ]
        wait_for(lambda: _ran(dsn) == expected_runs, timeout=60, what=f"{expected_runs}")
        results = _results(dsn)
        child = results[spawner.id]["result"]
        wait_for(
            lambda: _results(dsn).get(child, {}).get("status") == "SUCCESS",
            timeout=30,
            what="the child sent by .delay() inside a body to store its result",
        )
        results = _results(dsn)
    except BaseException:
        print(worker.output()[-6000:])
        raise
    finally:
        worker.close()

    assert (results[chained.id]["status"], results[chained.id]["result"]) == ("SUCCESS", 30)
    assert results[linked.id]["result"] == 5
    assert results[failing.id]["status"] == "FAILURE"
    assert results[flaky.id]["status"] == "SUCCESS" and results[flaky.id]["result"] == 2
    assert results[child]["result"] == 10
    handled = [v for v in results.values() if v.get("result") == "handled"]
    assert len(handled) == 1  # the errback, sent as a message, ran and stored its result
    rows = _job_rows(dsn)
    assert (failing.id, "dead") in rows and (chained.id, "done") in rows
    # 5 drained + chain step + link + errback + 2 retries + the .delay() inside = 11 rows
    assert len(rows) == 11 and [state for _, state in rows].count("done") == 10
    assert [task_id for task_id, _ in rows].count(flaky.id) == 3
    assert _broker_keys(r) == []  # no queue, no unacked message, no celery-task-meta-* in Redis
    assert worker.output().count("adopted the plain celery.Celery app") == 1


def test_an_adopted_app_keeps_ujobs_broker_tasks_on_its_broker(dsn: str, r: redis.Redis) -> None:
    """Adoption is what a celery_compat app does: names in ``ujobs_broker_tasks`` still go to
    the Celery broker, everything else to Postgres. (A fresh plain app: adoption changes its
    class for good.)"""
    from celery import Celery

    from celery_compat.app import Celery as BridgeCelery
    from ujobs_bridge.client import connect

    plain = Celery("adopt_unit", broker=ap.REDIS_URL, set_as_current=False)
    plain.conf.update(task_default_queue=ap.QUEUE, ujobs_broker_tasks=["kept.*"])

    @plain.task(name="moved.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    plain.amqp.router  # noqa: B018 - built before adoption, as the worker's loader does
    assert adopt(plain) and isinstance(plain, BridgeCelery) and not adopt(plain)
    client = connect(dsn, upgrade=False)
    plain.use_ujobs_client(client)
    try:
        sent = add.delay(1, 2)
        kept = plain.send_task("kept.task", (1,))
        assert _job_rows(dsn) == [(sent.id, "ready")]
        assert r.llen(ap.QUEUE) == 1
        body = json.loads(r.lindex(ap.QUEUE, 0) or b"{}")
        assert body["headers"]["id"] == kept.id
    finally:
        plain.close()
        client.close()
