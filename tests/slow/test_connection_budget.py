"""The connection budget, measured: how many server connections each kind of process holds at
rest and under load, read from ``pg_stat_activity``, for real subprocesses.

Why it exists: fifty workers against a server with ``max_connections = 100`` only fit if each
holds few. The docs' connection budget (docs/how-to/pgbouncer.md) states the bounds; this file measures them and
fails when a change makes a process hold more. A process's connections are found by their
client ports: the sockets its process group (the process and its pool children) holds towards
the server, matched to ``pg_stat_activity.client_port``; ``application_name`` then says what
each is for. Pools are told to give idle connections back after half a second
(``UJOBS_POOL_IDLE_S``) so "after the load" is reached within the test.

The numbers (asserted below, documented in docs/how-to/pgbouncer.md):

- worker (threads or processes pool, plain ``@job`` or celery_compat app): 2 at rest (the
  working connection shared by the claim loop, heartbeat and presence; the LISTEN connection);
  under load at most 2 + the step pool (concurrency + 1; a processes pool: 2 per child) + a
  celery_compat app's result pool (at most 8, and at most one per body running);
- scheduler (with the outbox relay): 1, at rest and firing;
- producer (``connect()``): 0 at rest, at most 4 (``max_size``) sending;
- celery_compat producer sending and reading results: at most 4 + 1 (the result listener),
  1 at rest once it has waited for a result;
- ``migrate --follow``: 1, at rest and draining.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import CliProc

from conftest import TESTS_DIR, wait_for
from ujobs_bridge.testing import redis_url
from ujobs_bridge.testing.pgbouncer import server_address

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SERVER_PORT = server_address()[1]  # the tests' server (UJOBS_TEST_ADMIN_DSN)
IDLE_S = "0.5"  # UJOBS_POOL_IDLE_S for the processes measured
REST_WINDOW_S = 1.5  # how long "at rest" is sampled
Db = psycopg.Connection[Any]


# ---------------------------------------------------------------------- measuring


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:  # fields: state, ppid, pgrp, ...
            pids.append(int(entry))
    return pids


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return inodes


def _server_ports(pgid: int) -> list[int]:
    """The local ports of the TCP connections the process group holds to the server."""
    inodes = _socket_inodes(_group_pids(pgid))
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if inode in inodes and state == "01" and int(remote.split(":")[1], 16) == SERVER_PORT:
                ports.append(int(local.split(":")[1], 16))
    return ports


def kind(application_name: str) -> str:
    """What a connection is for, without the ids in its name (``worker:<id>:steps`` → ``steps``)."""
    parts = application_name.removeprefix("ujobs:").split(":")
    if parts[0] == "worker":
        if parts[1] == "child":
            return "child-steps"
        return parts[-1] if parts[-1] in ("listen", "steps") else "worker"
    if parts[0] == "scheduler":
        return "scheduler"
    return ":".join(parts)


def held(db: Db, pgid: int) -> Counter[str]:
    """The server connections of process group ``pgid``, counted by kind (pg_stat_activity)."""
    ports = _server_ports(pgid)
    if not ports:
        return Counter()
    rows = db.execute(
        "select application_name from pg_stat_activity"
        " where client_port = any(%s) and datname = current_database()",
        (ports,),
    ).fetchall()
    return Counter(kind(row[0]) for row in rows)


def sample(db: Db, pgid: int, *, seconds: float = 0.0, until: Callable[[], bool] | None = None,
           timeout: float = 120.0) -> tuple[int, int, Counter[str]]:  # fmt: skip
    """Sample the group's connections every 20 ms for ``seconds`` (or until ``until()``):
    (fewest, most, the breakdown at the most)."""
    pause = threading.Event()
    fewest, most, at_most = 10**6, -1, Counter[str]()
    started = time.monotonic()
    while True:
        now = held(db, pgid)
        total = sum(now.values())
        fewest = min(fewest, total)
        if total > most:
            most, at_most = total, now
        elapsed = time.monotonic() - started
        if until is not None:
            if until():
                break
            assert elapsed < timeout, "the load never finished"
        elif elapsed >= seconds:
            break
        pause.wait(0.02)
    return fewest, most, at_most


def at_rest(db: Db, pgid: int) -> Counter[str]:
    """The connections held over ``REST_WINDOW_S`` of rest: the same count throughout."""
    fewest, most, breakdown = sample(db, pgid, seconds=REST_WINDOW_S)
    assert fewest == most, f"not at rest: between {fewest} and {most} ({dict(breakdown)})"
    return breakdown


def report(what: str, breakdown: Counter[str], peak: int | None = None) -> None:
    """Print a measured figure (``pytest -s`` shows them; the docs state their bounds)."""
    extra = f", peak under load {peak}" if peak is not None else ""
    print(f"[budget] {what}: {sum(breakdown.values())} {dict(sorted(breakdown.items()))}{extra}")


def unfinished(db: Db) -> bool:
    row = db.execute(
        "select count(*) from x_jobs where state not in ('done', 'failed', 'cancelled', 'dead')"
    ).fetchone()
    return row is not None and row[0] > 0


# ---------------------------------------------------------------------- processes


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., CliProc]]:
    started: list[CliProc] = []

    def start(args: list[str], **env: str) -> CliProc:
        proc = CliProc(
            args, tmp_path / f"proc{len(started)}.log", env={"UJOBS_POOL_IDLE_S": IDLE_S, **env}
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
        print(f"--- {' '.join(proc.args[:3])} (exit {proc.proc.returncode}) ---")
        print(proc.output()[-2000:])


def worker_ready(db: Db, proc: CliProc) -> None:
    wait_for(lambda: " ready:" in proc.output(), timeout=60, what="the worker to start")
    wait_for(
        lambda: held(db, proc.pid).get("listen") == 1 and held(db, proc.pid).get("worker") == 1,
        timeout=30,
        what="its working and LISTEN connections",
    )


def enqueue_stepped(dsn: str, count: int, hold_s: float) -> None:
    from apps.budget_jobs import stepped
    from ujobs_bridge import connect

    with connect(dsn, upgrade=False) as client:
        client.enqueue_many(stepped.call(i, hold_s) for i in range(count))


# ---------------------------------------------------------------------- workers


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_worker_holds_two_connections_at_rest_and_its_pools_only_under_load(
    dsn: str, db: Db, procs: Callable[..., CliProc], pool: str
) -> None:
    concurrency = 4 if pool == "threads" else 2
    args = ["worker", "-A", "apps.budget_jobs", "-Q", "budget", "-c", str(concurrency)]
    proc = procs([*args, "--pool", pool, "--lease", "6", "--dsn", dsn])
    worker_ready(db, proc)
    rest = at_rest(db, proc.pid)
    assert rest == Counter({"worker": 1, "listen": 1})

    enqueue_stepped(dsn, 8 * concurrency, hold_s=0.3)
    _, peak, loaded = sample(db, proc.pid, until=lambda: not unfinished(db))
    steps_max = concurrency + 1 if pool == "threads" else 2 * concurrency
    assert loaded["worker"] == 1 and loaded["listen"] == 1, loaded
    assert peak <= 2 + steps_max, loaded
    assert sum(n for k, n in loaded.items() if k.endswith("steps")) >= 1  # the pool was used

    wait_for(
        lambda: sum(held(db, proc.pid).values()) == 2,
        timeout=60,
        what="the step pool to give its idle connections back",
    )
    after = at_rest(db, proc.pid)
    report(f"worker --pool {pool} -c {concurrency}", after, peak)
    assert after == Counter({"worker": 1, "listen": 1})


def test_a_celery_compat_worker_holds_two_at_rest_and_its_result_pool_under_load(
    dsn: str, db: Db, procs: Callable[..., CliProc]
) -> None:
    from apps.budget_celery import app, slow_add
    from ujobs_bridge import connect

    concurrency = 4
    proc = procs(
        ["worker", "-A", "apps.budget_celery", "-c", str(concurrency), "--lease", "6"],
        UJOBS_DATABASE_URL=dsn,
    )
    worker_ready(db, proc)
    assert at_rest(db, proc.pid) == Counter({"worker": 1, "listen": 1})

    client = connect(dsn, upgrade=False)
    app.use_ujobs_client(client)
    try:
        for i in range(12 * concurrency):
            slow_add.delay(i, 1, hold_s=0.1)
    finally:
        app.use_ujobs_client(None)
        client.close()
    _, peak, loaded = sample(db, proc.pid, until=lambda: not unfinished(db))
    assert loaded["worker"] == 1 and loaded["listen"] == 1, loaded
    assert 1 <= loaded["client"] <= concurrency, loaded  # result writes: one per running body
    assert peak <= 2 + concurrency, loaded
    wait_for(
        lambda: sum(held(db, proc.pid).values()) == 2,
        timeout=60,
        what="the result pool to give its idle connections back",
    )
    after = at_rest(db, proc.pid)
    report(f"celery_compat worker -c {concurrency}", after, peak)
    assert after == Counter({"worker": 1, "listen": 1})


# ---------------------------------------------------------------------- scheduler


def test_a_scheduler_holds_one_connection_for_its_election_rounds_and_relay(
    dsn: str, db: Db, procs: Callable[..., CliProc]
) -> None:
    from apps.outbox_jobs import deliver
    from ujobs_bridge._internal.outbox.staging import stage

    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires, x_outbox")
    args = ["scheduler", "-A", "apps.sched_tasks", "--no-purge", "--lease", "3"]
    proc = procs([*args, "--interval", "0.25", "--dsn", dsn])
    wait_for(lambda: " ready:" in proc.output(), timeout=60, what="the scheduler to start")
    wait_for(
        lambda: db.execute("select count(*) from x_scheduler_fires").fetchone() != (0,),
        timeout=30,
        what="a first fire",
    )
    rest = at_rest(db, proc.pid)
    assert rest == Counter({"scheduler": 1})
    with psycopg.connect(dsn) as conn, conn.transaction():
        for i in range(300):
            stage(conn, deliver.call(i))

    def relayed() -> bool:
        row = db.execute("select count(*) from x_outbox where published_at is null").fetchone()
        return row == (0,)

    _, peak, loaded = sample(db, proc.pid, until=relayed)
    report("scheduler (firing every second, relaying 300 outbox rows)", rest, peak)
    assert peak == 1 and loaded == Counter({"scheduler": 1})


# ---------------------------------------------------------------------- producers


class Producer:
    """``budget_producer.py`` as a subprocess, driven over stdin."""

    def __init__(self, kind: str, dsn: str) -> None:
        env = dict(os.environ, UJOBS_DATABASE_URL=dsn, UJOBS_POOL_IDLE_S=IDLE_S)
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS_DIR / "budget_producer.py"), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=TESTS_DIR,
            start_new_session=True,
        )
        assert self._line() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def send(self, count: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"load {count}\n")
        self.proc.stdin.flush()

    def wait_done(self) -> str:
        return self._line()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def test_a_producer_holds_nothing_at_rest_and_at_most_its_pool_while_sending(
    dsn: str, db: Db
) -> None:
    producer = Producer("engine", dsn)
    try:
        assert at_rest(db, producer.pid) == Counter()
        done: list[str] = []
        reader = threading.Thread(target=lambda: done.append(producer.wait_done()))
        producer.send(3000)
        reader.start()
        _, peak, loaded = sample(db, producer.pid, until=lambda: bool(done))
        reader.join(60)
        assert done == ["done 3000"]
        assert 1 <= peak <= 4 and set(loaded) == {"client"}, loaded
        wait_for(lambda: not held(db, producer.pid), timeout=60, what="the pool to empty")
        report("producer (connect())", held(db, producer.pid), peak)
    finally:
        producer.close()


def test_a_celery_compat_producer_holds_its_result_listener_at_rest(
    dsn: str, db: Db, procs: Callable[..., CliProc]
) -> None:
    worker = procs(
        ["worker", "-A", "apps.budget_celery", "-c", "8", "--lease", "6"], UJOBS_DATABASE_URL=dsn
    )
    worker_ready(db, worker)
    producer = Producer("celery", dsn)
    try:
        assert at_rest(db, producer.pid) == Counter()  # nothing sent, nothing read yet
        done: list[str] = []
        reader = threading.Thread(target=lambda: done.append(producer.wait_done()))
        producer.send(200)
        reader.start()
        _, peak, loaded = sample(db, producer.pid, until=lambda: bool(done))
        reader.join(120)
        assert done == ["done 200"]
        assert loaded["celery:results"] == 1 and loaded["client"] <= 4, loaded
        assert peak <= 5, loaded
        wait_for(
            lambda: held(db, producer.pid) == Counter({"celery:results": 1}),
            timeout=60,
            what="the send pool to empty",
        )
        after = at_rest(db, producer.pid)
        report("celery_compat producer (.delay().get())", after, peak)
        assert after == Counter({"celery:results": 1})
    finally:
        producer.close()


# ---------------------------------------------------------------------- migrate


def test_migrate_follow_holds_one_connection(
    dsn: str, db: Db, procs: Callable[..., CliProc]
) -> None:
    import migrate_support as ms
    import redis

    url = redis_url(14)
    queue = f"bouncer-budget-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable: {exc}")
    db.execute("truncate x_migrate_quarantine")
    try:
        args = ["migrate", "-A", "apps.migrate_proj", "--broker", url, "-Q", queue]
        proc = procs([*args, "--follow", "--poll", "0.1", "--dsn", dsn])
        wait_for(lambda: "draining" in proc.output(), timeout=60, what="the drainer to start")
        wait_for(lambda: sum(held(db, proc.pid).values()) == 1, timeout=30, what="its connection")
        rest = at_rest(db, proc.pid)
        assert rest == Counter({"cli": 1})
        with ms.producer(url, queue) as p:
            for i in range(2000):
                p.add.delay(i, i)

        def drained() -> bool:
            row = db.execute("select count(*) from x_celery_tasks").fetchone()
            return row == (2000,)

        _, peak, loaded = sample(db, proc.pid, until=drained)
        report("migrate --follow (draining 2000 Redis messages)", rest, peak)
        assert peak == 1 and loaded == Counter({"cli": 1})
    finally:
        ms.clean_redis(client, queue)
        client.close()
