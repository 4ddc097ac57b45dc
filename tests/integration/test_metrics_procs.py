"""``--metrics-port`` on the scheduler and on ``migrate --follow``, scraped from the real
processes: the scheduler's fires and catch-ups after a known number of missed occurrences, the
drainer's moved / duplicate / quarantined after a known Redis backlog with a poison message, and
``/healthz`` and ``/readyz`` of each (ready while the process runs and its database answers);
and the dashboard's database series for the outbox lag (rows relayed by a real scheduler) and
the live workers (a real worker process).

The scheduler's tasks are daily with a phase the test sets (``tests/apps/obs_sched.py``), and
the test writes their watermark 3.5 days back: exactly 3 occurrences were missed and none falls
due while the test runs. Outcomes are awaited with ``wait_for``, never a sleep."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import celery
import psycopg
import pytest
import redis
from cli_proc import CliProc
from kombu import Connection
from test_metrics_health import get, samples, value

from conftest import wait_for
from ujobs_bridge.testing import redis_url

pytestmark = pytest.mark.timeout(180)

REDIS_URL = redis_url(8)  # this module's own Redis db (of the test kit's server)


@pytest.fixture
def procs() -> Iterator[list[CliProc]]:
    started: list[CliProc] = []
    yield started
    for proc in started:
        proc.close()
        print(f"--- {' '.join(proc.args[:1])} {proc.pid} ---\n{proc.output()[-3000:]}")


def endpoint(proc: CliProc) -> str:
    match = wait_for(
        lambda: (
            re.search(r"metrics: (http://\S+)/metrics", proc.output())
            or proc.proc.poll() is not None
        ),
        timeout=60,
        what="the metrics endpoint",
    )
    assert isinstance(match, re.Match), proc.output()
    return match.group(1)


def test_a_schedulers_metrics_count_the_occurrences_it_caught_up(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path, procs: list[CliProc]
) -> None:
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    now = datetime.now(UTC).replace(microsecond=0)
    anchor = now - timedelta(days=3, hours=12)  # occurrences: anchor + 1, 2, 3 days; next +4
    for name in ("obs-all", "obs-once"):
        db.execute(
            "insert into x_scheduler_state (task, watermark, updated_at) values (%s, %s, now())",
            (name, anchor),
        )
    proc = CliProc(
        ["scheduler", "-A", "apps.obs_sched", "--no-purge", "--interval", "0.25", "--lease", "3",
         "--metrics-port", "0", "--dsn", dsn],
        tmp_path / "scheduler.log",
        env={"OBS_ANCHOR": anchor.isoformat()},
    )  # fmt: skip
    procs.append(proc)
    base = endpoint(proc)
    fired = ("ujobs_scheduler_fires_total", (("task", "obs-once"),))
    found = wait_for(
        lambda: (s := samples(get(base + "/metrics")[1])).get(fired) and s,
        timeout=60,
        what="the round's catch-ups counted (obs-once fires after obs-all)",
    )
    assert value(found, "ujobs_scheduler_fires_total", task="obs-all") == 3
    assert value(found, "ujobs_scheduler_catch_ups_total", task="obs-all") == 3
    assert value(found, "ujobs_scheduler_fires_total", task="obs-once") == 1
    assert value(found, "ujobs_scheduler_catch_ups_total", task="obs-once") == 1
    ledger = db.execute(
        "select task, count(*), count(*) filter (where catch_up) from x_scheduler_fires"
        " group by task order by task"
    ).fetchall()
    assert ledger == [("obs-all", 3, 3), ("obs-once", 1, 1)]
    assert db.execute("select count(*) from x_jobs where queue = 'obs-sched'").fetchone() == (4,)
    assert get(base + "/healthz")[0] == 200
    status, body = get(base + "/readyz")
    ready = json.loads(body)
    assert status == 200 and ready["ok"] is True, body
    assert ready["leader"] is True and ready["database"] == "reachable"
    proc.term()
    assert proc.wait(timeout=60) == 0, proc.output()
    assert "fired=4" in proc.output() and "catch_ups=4" in proc.output()


@pytest.fixture
def redis_queue() -> Iterator[str]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_URL}: {exc}")
    name = f"obs-{uuid.uuid4().hex[:10]}"
    yield name
    for key in list(client.scan_iter(match=f"*{name}*", count=1000)):
        client.delete(key)
    client.close()


def _publish_backlog(queue: str) -> None:
    """Three messages to move, one published twice (a duplicate), and one malformed body."""
    app = celery.Celery(f"producer-{queue}", broker=REDIS_URL, set_as_current=False)
    app.conf.update(task_default_queue=queue, broker_connection_retry_on_startup=True)

    @app.task(name="migrate_proj.record", shared=False)
    def record(tag: str) -> str:
        return tag

    try:
        twice = str(uuid.uuid4())
        record.apply_async(("one",))
        record.apply_async(("two",), task_id=twice)
        record.apply_async(("two",), task_id=twice)
        task_id = str(uuid.uuid4())
        with Connection(REDIS_URL) as conn:
            conn.Producer().publish(
                b'[["half a list", {}',
                routing_key=queue,
                content_type="application/json",
                content_encoding="utf-8",
                headers={"lang": "py", "task": "migrate_proj.record", "id": task_id,
                         "root_id": task_id, "retries": 0},
                declare=[],
            )  # fmt: skip
        record.apply_async(("three",))
    finally:
        app.close()


def test_migrate_follow_metrics_count_a_known_backlog_with_a_poison_message(
    dsn: str, db: psycopg.Connection[Any], redis_queue: str, tmp_path: Path, procs: list[CliProc]
) -> None:
    db.execute("truncate x_migrate_quarantine")
    _publish_backlog(redis_queue)
    proc = CliProc(
        ["migrate", "-A", "apps.migrate_proj", "--broker", REDIS_URL, "-Q", redis_queue,
         "--follow", "--poll", "0.2", "--metrics-port", "0", "--dsn", dsn],
        tmp_path / "migrate.log",
    )  # fmt: skip
    procs.append(proc)
    base = endpoint(proc)
    moved = ("ujobs_migrate_messages_total", (("outcome", "moved"),))
    found = wait_for(
        lambda: (s := samples(get(base + "/metrics")[1])).get(moved, 0) >= 3 and s,
        timeout=90,
        what="the backlog drained",
    )
    assert value(found, "ujobs_migrate_messages_total", outcome="moved") == 3
    assert value(found, "ujobs_migrate_messages_total", outcome="duplicate") == 1
    assert value(found, "ujobs_migrate_messages_total", outcome="quarantined") == 1
    assert db.execute("select count(*) from x_celery_tasks").fetchone() == (3,)
    assert db.execute("select reason from x_migrate_quarantine").fetchall() == [("malformed",)]
    assert get(base + "/healthz")[0] == 200
    status, body = get(base + "/readyz")
    assert status == 200 and json.loads(body)["ok"] is True, body
    assert json.loads(body)["database"] == "reachable"
    proc.term()
    assert proc.wait(timeout=60) == 0, proc.output()


def test_the_dashboards_metrics_follow_the_outbox_lag_and_the_live_workers(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path, procs: list[CliProc]
) -> None:
    """Two outbox rows staged two minutes ago are pending with that lag until a real scheduler
    relays them; a real worker is one live worker on its queue while it runs."""
    from dashboard_support import Dashboard

    from apps.outbox_jobs import deliver
    from ujobs_bridge._internal.outbox.staging import stage

    with psycopg.connect(dsn) as conn, conn.transaction():
        staged = [stage(conn, deliver.call(n)).job_id for n in (1, 2)]
    db.execute(  # staged two minutes ago (as if no relay had run since)
        "update x_outbox set created_at = now() - interval '120 seconds' where job_id = any(%s)",
        (staged,),
    )
    dash = Dashboard(dsn, tmp_path / "dash.log")
    try:
        found = samples(dash.request("/metrics")[1])
        assert value(found, "ujobs_outbox_pending") == 2
        assert value(found, "ujobs_outbox_lag_seconds") >= 120
        assert value(found, "ujobs_live_workers", queue="outbox-tests") == 0
        relay = CliProc(
            ["scheduler", "--no-purge", "--interval", "0.25", "--dsn", dsn],
            tmp_path / "scheduler.log",
        )
        procs.append(relay)
        found = wait_for(
            lambda: (
                (s := samples(dash.request("/metrics")[1])).get(("ujobs_outbox_pending", ())) == 0
                and s
            ),
            timeout=60,
            what="the relay to publish the outbox",
        )
        assert value(found, "ujobs_outbox_lag_seconds") == 0
        assert db.execute(
            "select count(*) from x_jobs where id = any(%s)", (staged,)
        ).fetchone() == (2,)
        worker = CliProc(
            ["worker", "-A", "apps.outbox_jobs", "--poll", "0.2", "--dsn", dsn],
            tmp_path / "worker.log",
        )
        procs.append(worker)
        wait_for(
            lambda: (
                value(
                    samples(dash.request("/metrics")[1]), "ujobs_live_workers", queue="outbox-tests"
                )
                == 1
            ),
            timeout=60,
            what="the worker counted live",
        )
        worker.term()
        assert worker.wait(timeout=60) == 0, worker.output()
        found = samples(dash.request("/metrics")[1])
        assert value(found, "ujobs_live_workers", queue="outbox-tests") == 0  # a clean exit
    finally:
        dash.close()
