"""Celery's pool and beat flags on real worker processes, through both worker commands
(``ujobs-bridge worker`` and the real ``celery -A proj worker`` console script on a celery_compat
app): ``--time-limit`` / ``--soft-time-limit`` (also in ``-P prefork`` children),
``--max-tasks-per-child`` / ``--max-memory-per-child``, ``--autoscale`` with the remote-control
``autoscale`` / ``pool_grow`` / ``pool_shrink``, ``-B``, and hung bodies in ``inspect active``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery.exceptions import TimeLimitExceeded
from worker_proc import TESTS_DIR

from apps import celery_flags_app as fa
from apps import flag_jobs
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
)
from conftest import wait_for
from ujobs_bridge._internal.worker import remote
from ujobs_bridge.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
HOST = socket.gethostname()
CELERY = str(Path(sys.executable).parent / "celery")  # the real console script of this venv
APP = "apps.celery_flags_app"


class Proc:
    """A worker process of either command, in its own session, logging to a file."""

    def __init__(
        self, dsn: str, kind: str, app: str, log: Path, args: list[str], env: dict[str, str]
    ) -> None:
        full = dict(os.environ)
        full["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), full.get("PYTHONPATH", "")])
        full["UJOBS_DATABASE_URL"] = dsn
        full["CELERY_CLI_TEST_DSN"] = dsn
        full.update(env)
        if kind == "celery":
            command = [CELERY, "-A", app, "worker", *args]
        else:
            command = [sys.executable, "-m", "ujobs_bridge", "worker", "-A", app, "--dsn", dsn]
            command += ["--lease", "3", "--poll", "0.2", *args]
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            command,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=full,
            cwd=TESTS_DIR,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def ready(self) -> None:
        wait_for(
            lambda: self.proc.poll() is not None or " ready:" in self.output(),
            timeout=60,
            what="the worker ready",
        )
        assert self.proc.poll() is None, self.output()

    def term(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._out.close()


@pytest.fixture
def start(dsn: str, tmp_path: Path) -> Iterator[Any]:
    """``start(kind, *args, app=APP, env={})``: a worker process, ready; killed at teardown
    (its log shown when the test failed)."""
    started: list[Proc] = []

    def run(kind: str, *args: str, app: str = APP, env: dict[str, str] | None = None) -> Proc:
        log = tmp_path / f"worker{len(started)}.log"
        proc = Proc(dsn, kind, app, log, list(args), env or {})
        started.append(proc)
        proc.ready()
        return proc

    try:
        with bound(fa.app, dsn):
            yield run
    finally:
        for proc in started:
            proc.close()
            print(f"---- {proc.log.name}\n{proc.output()}")  # shown when the test failed


def refused(dsn: str, kind: str, *args: str, app: str = APP) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    env["CELERY_CLI_TEST_DSN"] = dsn
    if kind == "celery":
        command = [CELERY, "-A", app, "worker", *args]
    else:
        command = [sys.executable, "-m", "ujobs_bridge", "worker", "-A", app, "--dsn", dsn, *args]
    done = subprocess.run(
        command, env=env, cwd=TESTS_DIR, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stdout + done.stderr
    return done


def inspect(node: str) -> Any:
    return fa.app.control.inspect(destination=[node], timeout=5)


def pool_of(node: str) -> dict[str, Any]:
    stats = inspect(node).stats() or {}
    return dict(stats.get(node, {}).get("pool", {}))


# ------------------------------------------------------------------------------- time limits


@pytest.mark.parametrize(
    ("kind", "pool"), [("bridge", "threads"), ("bridge", "prefork"), ("celery", "prefork")]
)
def test_time_limits_are_defaults_for_tasks_in_the_worker_and_its_pool_children(
    start: Any, kind: str, pool: str
) -> None:
    node = f"limits@{HOST}"
    worker = start(kind, "-P", pool, "-c", "2", "-n", node, "--soft-time-limit", "1",
                   "--time-limit", "3", "-Q", "flags")  # fmt: skip
    caught = fa.soft.delay().get(timeout=60)
    assert caught.startswith("soft in ")  # SoftTimeLimitExceeded raised in the body
    if pool == "prefork":
        assert int(caught.split()[-1]) != worker.pid  # ... of a pool child
    with pytest.raises(TimeLimitExceeded):
        fa.stubborn.delay().get(timeout=60)  # ignores the soft limit: the hard one ends it
    assert pool_of(node)["timeouts"] == [1.0, 3.0]
    assert fa.whoami.delay().get(timeout=60)["retries"] == 0  # the pool still runs tasks
    assert worker.term() == 0


@pytest.mark.parametrize("kind", ["bridge", "celery"])
def test_time_limit_kills_a_prefork_child_blocked_in_sleep_at_the_limit(
    start: Any, kind: str
) -> None:
    """Celery's prefork pool kills the child at ``time_limit`` whatever it does; the task fails
    with ``TimeLimitExceeded`` and the pool goes on with a fresh child."""
    start(kind, "-P", "prefork", "-c", "1", "-Q", "flags")
    began = time.monotonic()
    with pytest.raises(TimeLimitExceeded) as failed:
        fa.blocked_hard.delay(30).get(timeout=60)
    took = time.monotonic() - began
    assert 1.5 < took < 10, took  # at about 2 s, not after the 30 s sleep
    assert "2.0" in repr(failed.value)
    assert fa.whoami.delay().get(timeout=60)["retries"] == 0  # a fresh child runs the next


@pytest.mark.parametrize("where", ["sleep", "socket"])
def test_soft_time_limit_reaches_a_prefork_body_blocked_in_sleep_or_a_socket_read(
    start: Any, where: str
) -> None:
    """Billiard signals the child's main thread at ``soft_time_limit``: a body blocked in
    ``time.sleep`` or a socket read gets ``SoftTimeLimitExceeded`` there and may catch it."""
    worker = start("celery", "-P", "prefork", "-c", "1", "-Q", "flags")
    began = time.monotonic()
    seen = fa.blocked_soft.delay(12, where).get(timeout=60)
    took = time.monotonic() - began
    assert seen["caught"], seen
    assert 0.8 < seen["after_s"] < 6, seen  # at about 1 s, not after the 12 s block
    assert took < 10, took
    assert seen["pid"] != worker.pid  # in a pool child


def test_time_limit_is_the_timeout_of_jobs_that_declare_none(
    dsn: str, client: Client, start: Any
) -> None:
    worker = start("bridge", "-Q", "flagjobs", "--time-limit", "1", app="apps.flag_jobs")
    ref = flag_jobs.slow.configure(client=client).enqueue(60)
    wait_for(
        lambda: [j["state"] for j in jobs(dsn, flag_jobs.slow.name)] == ["dead"],
        timeout=60,
        what="the job timed out",
    )
    (row,) = jobs(dsn, flag_jobs.slow.name)
    assert row["id"] == ref.id and "UJ_JOB_TIMEOUT" in (row["last_error"] or "")
    assert worker.term() == 0


def test_a_soft_time_limit_is_refused_for_a_module_of_jobs(dsn: str) -> None:
    done = refused(dsn, "bridge", "--soft-time-limit", "5", app="apps.flag_jobs")
    assert "not a Celery app" in done.stderr


# ------------------------------------------------------------------------- child recycling


@pytest.mark.parametrize("kind", ["bridge", "celery"])
def test_max_tasks_per_child_replaces_a_child_after_n_tasks(
    dsn: str, start: Any, kind: str
) -> None:
    node = f"recycle@{HOST}"
    start(kind, "-P", "prefork", "-c", "1", "--max-tasks-per-child", "2", "-n", node,
          "-Q", "flags")  # fmt: skip
    seen = [fa.whoami.delay().get(timeout=60) for _ in range(6)]
    per_child = Counter(s["pid"] for s in seen)
    assert len(per_child) == 3 and set(per_child.values()) == {2}, per_child
    assert {s["retries"] for s in seen} == {0}  # each task ran once; no job was charged
    wait_for(
        lambda: (
            [j["attempt"] for j in jobs(dsn, "flags.whoami") if j["state"] == "done"] == [1] * 6
        ),
        timeout=30,
        what="six jobs done at their first attempt",
    )
    assert pool_of(node)["max-tasks-per-child"] == 2


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_the_apps_worker_max_tasks_per_child_applies_to_the_process_pool(
    start: Any, pool: str
) -> None:
    worker = start("celery", "-P", pool, "-c", "1", "-Q", "flags",
                   env={"FLAGS_APP_MAX_TASKS": "1"})  # fmt: skip
    pids = {fa.whoami.delay().get(timeout=60)["pid"] for _ in range(3)}
    if pool == "prefork":
        assert len(pids) == 3  # a fresh child for every task
    else:  # per process, as in Celery: the thread pool runs without it, and says so
        assert pids == {worker.pid}
        assert "worker_max_tasks_per_child=1 is per pool process" in worker.output()


@pytest.mark.parametrize("kind", ["bridge", "celery"])
def test_max_memory_per_child_replaces_a_child_once_a_task_leaves_it_over(
    start: Any, kind: str
) -> None:
    limit_kib = 400 * 1024
    start(kind, "-P", "prefork", "-c", "1", "--max-memory-per-child", str(limit_kib),
          "-Q", "flags")  # fmt: skip
    first = fa.whoami.delay().get(timeout=60)
    assert first["rss_kib"] < limit_kib  # the child starts under the limit ...
    assert fa.whoami.delay().get(timeout=60)["pid"] == first["pid"]  # ... and is kept
    hogged = fa.hog.delay(500).get(timeout=60)  # the task that goes over still completes
    assert hogged["pid"] == first["pid"] and hogged["rss_kib"] > limit_kib
    after = fa.whoami.delay().get(timeout=60)
    assert after["pid"] != first["pid"] and after["rss_kib"] < limit_kib


@pytest.mark.parametrize("kind", ["bridge", "celery"])
def test_per_child_limits_are_refused_on_the_thread_pool(dsn: str, kind: str) -> None:
    done = refused(dsn, kind, "-P", "threads", "--max-tasks-per-child", "5")
    assert "needs the process pool" in done.stderr


# ------------------------------------------------------------------------------ autoscale


@pytest.mark.parametrize(("kind", "pool"), [("bridge", "threads"), ("celery", "prefork")])
def test_autoscale_grows_while_jobs_wait_and_shrinks_when_idle(
    start: Any, tmp_path: Path, kind: str, pool: str
) -> None:
    node = f"scale@{HOST}"
    start(kind, "-P", pool, "--autoscale", "3,1", "-n", node, "-Q", "flags",
          env={"AUTOSCALE_KEEPALIVE": "2"})  # fmt: skip
    assert pool_of(node)["max-concurrency"] == 1
    gate = tmp_path / "gate"
    results = [fa.gated.delay(str(gate)) for _ in range(5)]
    wait_for(lambda: len((inspect(node).active() or {}).get(node, [])) == 3, timeout=60,
             what="three bodies running")  # fmt: skip
    grown = pool_of(node)
    assert grown["max-concurrency"] == 3
    if pool == "prefork":
        assert len(grown["processes"]) == 3
    stats = inspect(node).stats()[node]
    assert stats["autoscaler"]["max"] == 3 and stats["autoscaler"]["min"] == 1
    control = fa.app.control
    assert control.pool_grow(1, reply=True, destination=[node], timeout=5) == [
        {node: {"error": "pool_grow is not supported with autoscale. Adjust autoscale range "
                "instead."}}
    ]  # fmt: skip
    assert control.autoscale(2, 1, reply=True, destination=[node], timeout=5) == [
        {node: {"ok": "autoscale now max=2 min=1"}}
    ]
    assert pool_of(node)["max-concurrency"] == 2  # inside the new range at once
    gate.touch()
    assert len({r.get(timeout=60) for r in results}) >= 1
    wait_for(lambda: pool_of(node).get("max-concurrency") == 1, timeout=60, what="shrunk to 1")
    if pool == "prefork":
        wait_for(lambda: len(pool_of(node)["processes"]) == 1, timeout=60, what="one child")


@pytest.mark.parametrize(("kind", "pool"), [("bridge", "threads"), ("bridge", "prefork")])
def test_pool_grow_and_shrink_resize_either_pool(start: Any, kind: str, pool: str) -> None:
    node = f"resize@{HOST}"
    start(kind, "-P", pool, "-c", "1", "-n", node, "-Q", "flags")
    control = fa.app.control
    assert control.autoscale(4, 1, reply=True, destination=[node], timeout=5) == [
        {node: {"error": "ValueError('Autoscale not enabled')"}}
    ]
    assert control.pool_grow(2, reply=True, destination=[node], timeout=5) == [
        {node: {"ok": "pool will grow"}}
    ]
    assert pool_of(node)["max-concurrency"] == 3
    if pool == "prefork":
        wait_for(lambda: len(pool_of(node)["processes"]) == 3, timeout=60, what="three children")
    assert control.pool_shrink(2, reply=True, destination=[node], timeout=5) == [
        {node: {"ok": "pool will shrink"}}
    ]
    if pool == "prefork":
        wait_for(lambda: len(pool_of(node)["processes"]) == 1, timeout=60, what="one child")
    assert pool_of(node)["max-concurrency"] == 1
    assert fa.whoami.delay().get(timeout=60)["retries"] == 0


def test_autoscale_without_a_minimum_is_refused_with_the_fix(dsn: str) -> None:
    done = refused(dsn, "bridge", "--autoscale", "10")
    assert "--autoscale 10,1" in done.stderr
    assert "drop -c" in refused(dsn, "celery", "--autoscale", "4,2", "-c", "3").stderr


# ------------------------------------------------------------------------------------- -B


def _leader(dsn: str) -> tuple[int, bool] | None:
    """(pid in the holder, lease live) of the scheduler leader, if any."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select holder, expires_at >= now() from x_scheduler_leader").fetchone()
    return None if row is None else (int(row[0].split(":")[1]), bool(row[1]))


def _fires(dsn: str) -> list[Any]:
    """The occurrences of the app's beat entry ``tick`` fired (one row each, ever)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select occurrence_at from x_scheduler_fires where task = 'beat:tick'"
            " order by occurrence_at"
        ).fetchall()
    return [r[0] for r in rows]


def test_beat_in_two_workers_fires_each_occurrence_once_and_stops_with_its_worker(
    dsn: str, start: Any
) -> None:
    first = start("bridge", "-B", "-n", f"b1@{HOST}", "-Q", "flags")
    second = start("celery", "-B", "-n", f"b2@{HOST}", "-Q", "flags")
    wait_for(lambda: len(_fires(dsn)) >= 3, timeout=60, what="three ticks fired")
    leader = _leader(dsn)
    assert leader is not None and leader[1] and leader[0] in (first.pid, second.pid)
    leading, other = (first, second) if leader[0] == first.pid else (second, first)
    assert leading.term() == 0  # its scheduler stops with it and gives the lease back
    wait_for(lambda: (_leader(dsn) or (0, False)) == (other.pid, True), timeout=60,
             what="the other -B worker leading")  # fmt: skip
    count = len(_fires(dsn))
    wait_for(lambda: len(_fires(dsn)) >= count + 2, timeout=60, what="ticks fired on")
    wait_for(lambda: any(j["state"] == "done" for j in jobs(dsn, "flags.tick")), timeout=30,
             what="a tick run")  # fmt: skip
    assert other.term() == 0
    assert _leader(dsn) == (other.pid, False)  # resigned at exit
    assert len(jobs(dsn, "flags.tick")) == len(_fires(dsn))  # no occurrence sent twice


def test_without_beat_the_worker_fires_nothing(dsn: str, start: Any) -> None:
    worker = start("bridge", "-Q", "flags")
    assert fa.whoami.delay().get(timeout=60)["retries"] == 0
    assert _fires(dsn) == [] and _leader(dsn) is None
    assert worker.term() == 0


# ---------------------------------------------------------------------------- hung bodies


def _replies(dsn: str, command: str, **arguments: Any) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = remote.broadcast(conn, command, json.dumps(arguments), reply=True, timeout=5)
    return {r.node: json.loads(r.value_json) for r in got}


def test_a_hung_body_is_listed_by_inspect_active_until_it_returns(
    dsn: str, client: Client, start: Any, tmp_path: Path
) -> None:
    node = f"hung@{HOST}"
    start("bridge", "-Q", "flagjobs", "-n", node, app="apps.flag_jobs")
    gate = tmp_path / "gate"
    ref = flag_jobs.stuck.configure(client=client).enqueue(str(gate))

    def running() -> list[dict[str, Any]]:
        answer = _replies(dsn, "attempts", running=True).get(node) or {}
        return list(answer.get("attempts", []))

    def hung() -> list[dict[str, Any]]:
        return [a for a in running() if a["hung"]]

    (entry,) = wait_for(hung, timeout=60, what="the body listed as hung")  # type: ignore[misc]
    assert entry["job_id"] == str(ref.id) and entry["timeout_s"] == 1.0 and entry["overdue_s"] > 0
    assert _replies(dsn, "stats")[node]["hung"] == 1
    assert [j["state"] for j in jobs(dsn, flag_jobs.stuck.name)] in (["dead"], ["running"])
    gate.touch()
    wait_for(lambda: not running(), timeout=60, what="nothing running")
    assert _replies(dsn, "stats")[node]["hung"] == 0
    wait_for(lambda: [j["state"] for j in jobs(dsn, flag_jobs.stuck.name)] == ["dead"],
             timeout=30, what="the timed-out attempt dead")  # fmt: skip
