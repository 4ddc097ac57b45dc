"""``migrate --follow`` rides through database and broker outages: nothing lost, nothing doubled.

Why it exists: a follower runs next to Celery for weeks; a database restart, a crash, a killed
session or a dropped broker connection must not end it (``migrate/outages.py``). Each test runs
``ujobs-bridge migrate --follow`` as a real process against a Postgres cluster of this module's
own (``private_cluster``: restarted ``-m fast``, crashed ``-m immediate``, its sessions
terminated), never the shared server, and a real Redis backlog published by real Celery (Redis
db 10). Messages published before, during and after the outage are each one row, exactly once,
and the broker (queue and processing lists) ends empty. SIGTERM during an outage exits 0 at
once, holding nothing: a later run moves the rest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import migrate_support as ms
import psycopg
import pytest
import redis
from cli_proc import CliProc

from conftest import wait_for
from ujobs_bridge.testing import PrivateCluster, RabbitVhost, redis_url

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
REDIS_URL = redis_url(10)  # this module's own Redis db (of the test kit's server)


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_URL}: {exc}")
    yield client
    client.close()


@pytest.fixture
def queue(r: redis.Redis) -> Iterator[str]:
    name = ms.unique("out")
    yield name
    ms.clean_redis(r, name)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[list[CliProc]]:
    started: list[CliProc] = []
    yield started
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- migrate {proc.pid} (exit {proc.proc.returncode}) ---\n{proc.output()[-6000:]}")


def migrate(
    procs: list[CliProc], tmp_path: Path, dsn: str, queue: str, drainer: str, *extra: str
) -> CliProc:
    args = ["migrate", "-A", "apps.migrate_proj", "--broker", REDIS_URL, "-Q", queue]
    args += ["--batch", "20", "--json", "--dsn", dsn, "--drainer-id", drainer, *extra]
    proc = CliProc(args, tmp_path / f"migrate{len(procs)}.log")
    procs.append(proc)
    return proc


def follow(procs: list[CliProc], tmp_path: Path, dsn: str, queue: str, drainer: str) -> CliProc:
    return migrate(procs, tmp_path, dsn, queue, drainer, "--follow", "--poll", "0.1")


def publish(queue: str, tags: list[str]) -> list[str]:
    with ms.producer(REDIS_URL, queue) as p:
        return [p.record.delay(tag).id for tag in tags]


def ledger(dsn: str) -> Counter[str]:
    """Task id -> job rows made for it (x_celery_tasks joined to x_jobs); empty while down."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "select t.task_id from x_celery_tasks t join x_jobs j on j.id = t.job_id"
            ).fetchall()
    except psycopg.OperationalError:
        return Counter()
    return Counter(r[0] for r in rows)


def moved(dsn: str, ids: list[str]) -> bool:
    have = ledger(dsn)
    return all(i in have for i in ids)


def broker_lists(r: redis.Redis, queue: str) -> dict[str, int]:
    """Every non-empty Redis list holding messages of ``queue`` (queue and processing lists)."""
    out = {}
    for key in r.scan_iter(match=f"*{queue}*", count=1000):
        if r.type(key) == b"list" and (n := int(r.llen(key))):
            out[key.decode("utf-8", "replace")] = n
    return out


def report(proc: CliProc) -> dict[str, Any]:
    out = proc.output()
    starts = [m.start() for m in re.finditer(r"^\{$", out, re.MULTILINE)]
    assert starts, out[-3000:]
    parsed: dict[str, Any] = json.loads(out[starts[-1] :])
    return parsed


def outage_lines(proc: CliProc) -> list[str]:
    return [line for line in proc.output().splitlines() if "migrate.outage:" in line]


def assert_exactly_once(dsn: str, r: redis.Redis, queue: str, ids: list[str]) -> None:
    have = ledger(dsn)
    assert set(have) == set(ids), f"missing {len(set(ids) - set(have))}"
    assert max(have.values()) == 1, [k for k, n in have.items() if n > 1][:5]
    assert broker_lists(r, queue) == {}


def terminate_sessions(dsn: str) -> int:
    """``pg_terminate_backend`` on every other session of the database; returns once gone."""
    others = "from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()"
    with psycopg.connect(dsn, autocommit=True) as conn:
        killed = conn.execute(f"select array_agg(pid) {others}").fetchone()
        pids = killed[0] if killed and killed[0] else []
        conn.execute("select count(pg_terminate_backend(pid)) from unnest(%s::int[]) pid", (pids,))
        wait_for(
            lambda: (
                conn.execute(
                    "select count(*) from pg_stat_activity where datname = current_database() and pid = any(%s)",
                    (pids,),
                ).fetchone()
                == (0,)
            ),
            what="the terminated sessions to end",
        )
    return len(pids)


def test_follow_rides_through_a_restart_a_crash_and_killed_sessions(
    private_cluster: PrivateCluster,
    outage_dsn: str,
    r: redis.Redis,
    queue: str,
    procs: list[CliProc],
    tmp_path: Path,
) -> None:
    """Messages drained before, during and after a fast restart, a crash (recovery on start)
    and pg_terminate_backend: every one a row exactly once, the broker empty, each outage said
    once with its code, and the follower still there to SIGTERM (exit 0)."""
    proc = follow(procs, tmp_path, outage_dsn, queue, ms.unique("drainer"))
    ids = publish(queue, [f"before-{i}" for i in range(300)])
    wait_for(lambda: len(ledger(outage_dsn)) >= 40, timeout=60, what="the drain to be under way")

    private_cluster.stop("fast")  # mid-drain: the batch in flight fails
    ids += publish(queue, [f"during-fast-{i}" for i in range(100)])
    wait_for(lambda: len(outage_lines(proc)) == 1, timeout=60, what="the outage to be said")
    private_cluster.start()
    ids += publish(queue, [f"after-fast-{i}" for i in range(100)])
    wait_for(lambda: moved(outage_dsn, ids), timeout=120, what="everything after the restart")

    ids += publish(queue, [f"crash-{i}" for i in range(200)])
    wait_for(lambda: len(ledger(outage_dsn)) > 500, timeout=60, what="the next drain under way")
    private_cluster.stop("immediate")  # a crash: the start below runs recovery
    ids += publish(queue, [f"during-crash-{i}" for i in range(50)])
    wait_for(lambda: len(outage_lines(proc)) == 2, timeout=60, what="the crash to be said")
    private_cluster.start()
    wait_for(lambda: moved(outage_dsn, ids), timeout=120, what="everything after the crash")

    assert terminate_sessions(outage_dsn) >= 1  # the follower's session, idle between polls
    ids += publish(queue, [f"after-kill-{i}" for i in range(100)])
    wait_for(lambda: moved(outage_dsn, ids), timeout=120, what="everything after the kill")
    assert proc.proc.poll() is None, "the follower ended"

    proc.term()
    assert proc.wait(30) == 0, proc.output()[-3000:]
    assert_exactly_once(outage_dsn, r, queue, ids)
    got = report(proc)
    assert got["outages"] == len(outage_lines(proc)) >= 3
    assert got["moved"] == len(ids) and got["quarantined"] == 0
    assert got["stopped_by_signal"] is True
    said = "\n".join(outage_lines(proc))
    assert "UJ_DATABASE_UNAVAILABLE" in said and "127.0.0.1" in said
    assert "Traceback" not in proc.output()


def test_sigterm_during_an_outage_exits_0_at_once_and_the_next_run_moves_the_rest(
    private_cluster: PrivateCluster,
    outage_dsn: str,
    r: redis.Redis,
    queue: str,
    procs: list[CliProc],
    tmp_path: Path,
) -> None:
    """The database crashes under a follower, which is told to stop while it waits: it exits 0
    at once; what it held is still in the broker (its processing lists), and one run with the
    same drainer id later moves all of it, each message once."""
    drainer = ms.unique("drainer")
    proc = follow(procs, tmp_path, outage_dsn, queue, drainer)
    ids = publish(queue, [f"m-{i}" for i in range(400)])
    wait_for(lambda: len(ledger(outage_dsn)) >= 40, timeout=60, what="the drain to be under way")
    private_cluster.stop("immediate")
    ids += publish(queue, [f"down-{i}" for i in range(100)])  # met by the follower, if idle
    wait_for(lambda: outage_lines(proc), timeout=60, what="the outage to be said")
    proc.term()
    assert proc.wait(20) == 0, proc.output()[-3000:]  # the database is still down
    got = report(proc)
    assert got["stopped_by_signal"] is True and got["outages"] == 1

    private_cluster.start()
    assert len(ledger(outage_dsn)) < len(ids)  # the rest waits in the broker (lists included)
    rest = migrate(procs, tmp_path, outage_dsn, queue, drainer)  # one run, same drainer id
    assert rest.wait(120) == 0, rest.output()[-3000:]
    assert_exactly_once(outage_dsn, r, queue, ids)


def test_follow_rides_through_its_redis_connection_being_killed_again_and_again(
    outage_dsn: str, r: redis.Redis, queue: str, procs: list[CliProc], tmp_path: Path
) -> None:
    """CLIENT KILL of the follower's own connection (found by its name, never another
    client's), over and over while a backlog drains: every message once, the broker empty."""
    drainer = f"drainer-{uuid.uuid4().hex[:8]}"
    proc = follow(procs, tmp_path, outage_dsn, queue, drainer)
    ids = publish(queue, [f"k-{i}" for i in range(1500)])
    kills = [0]

    def kill_then_check() -> bool:
        for client in r.client_list():
            if client.get("name", "").startswith(f"ujobs-migrate:{drainer}#"):
                kills[0] += int(r.client_kill_filter(_id=client["id"]))
        return moved(outage_dsn, ids)

    wait_for(kill_then_check, timeout=180, what="the backlog to drain between kills")
    assert kills[0] >= 1
    ids += publish(queue, [f"after-{i}" for i in range(50)])
    wait_for(lambda: moved(outage_dsn, ids), timeout=60, what="the follower to go on")
    proc.term()
    assert proc.wait(30) == 0, proc.output()[-3000:]
    assert_exactly_once(outage_dsn, r, queue, ids)
    print(f"kills: {kills[0]}, outages ridden: {report(proc)['outages']}")


# This module's own RabbitMQ vhost (unique to the process: parallel runs never share it), made and
# deleted by the fixture: the test closes every connection on it.
VHOST = RabbitVhost(name=f"ujobs_i13left_{os.getpid()}_{uuid.uuid4().hex[:6]}")
AMQP_URL = VHOST.url


def rabbitmqctl(*args: str) -> str:
    done = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def vhost() -> Iterator[str]:
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed")
    rabbitmqctl("add_vhost", VHOST.name)
    try:
        rabbitmqctl("set_permissions", "-p", VHOST.name, VHOST.user, ".*", ".*", ".*")
        yield VHOST.name
    finally:
        rabbitmqctl("delete_vhost", VHOST.name)


def close_connections(vhost: str) -> int:
    """``rabbitmqctl close_connection`` on every connection of ``vhost`` (this module's own)."""
    closed = 0
    for line in rabbitmqctl("list_connections", "pid", "vhost").splitlines():
        pid, _, where = line.partition("\t")
        if where.strip() == vhost and pid.startswith("<"):
            rabbitmqctl("close_connection", pid, "test: the broker drops the drainer")
            closed += 1
    return closed


def test_follow_rides_through_rabbitmq_closing_its_connection(
    outage_dsn: str, vhost: str, procs: list[CliProc], tmp_path: Path
) -> None:
    """RabbitMQ closes the follower's connection with deliveries unacked: they are requeued,
    the follower reconnects with backoff and takes them again; every message once."""
    queue = ms.unique("amq")
    with ms.producer(AMQP_URL, queue) as p:  # the queue exists before the drainer looks
        ids = [p.record.delay(f"a-{i}").id for i in range(600)]
    args = ["migrate", "-A", "apps.migrate_proj", "--broker", AMQP_URL, "-Q", queue, "--follow"]
    args += ["--poll", "0.1", "--batch", "20", "--json", "--dsn", outage_dsn]
    proc = CliProc(args, tmp_path / "amqp.log")
    procs.append(proc)
    wait_for(lambda: len(ledger(outage_dsn)) >= 40, timeout=60, what="the drain to be under way")
    assert close_connections(vhost) >= 1
    wait_for(lambda: outage_lines(proc), timeout=60, what="the broker outage to be said")
    with ms.producer(AMQP_URL, queue) as p:
        ids += [p.record.delay(f"after-{i}").id for i in range(50)]
    wait_for(lambda: moved(outage_dsn, ids), timeout=120, what="every message, once")
    proc.term()
    assert proc.wait(30) == 0, proc.output()[-3000:]
    have = ledger(outage_dsn)
    assert set(have) == set(ids) and max(have.values()) == 1
    got = report(proc)
    assert got["outages"] >= 1 and "UJ_BROKER_UNAVAILABLE" in "\n".join(outage_lines(proc))
    assert got["moved"] == len(ids)
