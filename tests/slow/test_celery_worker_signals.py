"""Celery's worker signals under a real ``ujobs-bridge worker -A`` process, for the thread and the
process pool: each fires the number of times Celery fires it, in the process Celery fires it in
(main process or pool child), in Celery's order, with Celery's senders and arguments."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from worker_proc import WorkerProc

from apps import celery_signal_app as s
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
)
from conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

MAIN_ORDER = [
    "celeryd_init",
    "worker_init",
    "celeryd_after_setup",
    "worker_ready",
    "worker_shutting_down",
    "worker_shutdown",
]


def lines(log: Path) -> list[tuple[str, int, str]]:
    out = []
    for line in log.read_text().splitlines():
        name, pid, detail = line.split(" ", 2)
        out.append((name, int(pid), detail))
    return out


@pytest.fixture
def signal_log(tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "signals.log"
    log.touch()
    os.environ["SIGNAL_APP_LOG"] = str(log)  # inherited by the worker process
    try:
        yield log
    finally:
        os.environ.pop("SIGNAL_APP_LOG", None)
        os.environ.pop("SIGNAL_APP_OWN_LOGGING", None)


def run_worker(dsn: str, tmp_path: Path, extra: list[str], tasks: int) -> WorkerProc:
    """Start the worker, run ``tasks`` tasks, stop it with SIGTERM; the worker's pid."""
    worker = WorkerProc(
        dsn, "apps.celery_signal_app", "signals", tmp_path / "worker.log", extra=extra
    )
    try:
        with bound(s.app, dsn):
            results = [s.where.delay() for _ in range(tasks)]
            pids = {r.get(timeout=30) for r in results}
        # to the main process only, as systemd's KillMode=mixed does: a pool child, like
        # Celery's, dies at once on its own SIGTERM (no worker_process_shutdown, in either)
        os.kill(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    except BaseException:
        print(worker.output())
        raise
    finally:
        worker.close()
    assert pids
    return worker


def test_thread_pool_fires_the_main_process_signals_in_celerys_order(
    dsn: str, tmp_path: Path, signal_log: Path
) -> None:
    worker = run_worker(dsn, tmp_path, ["--pool", "threads", "-c", "2"], tasks=1)
    fired = lines(signal_log)
    assert {pid for _, pid, _ in fired} == {worker.pid}, fired  # all in the main process
    names = [name for name, _, _ in fired]
    # no receiver takes setup_logging: the worker's logging stands, after_setup_logger follows
    assert names == [
        "celeryd_init",
        "worker_init",
        "after_setup_logger",
        "celeryd_after_setup",
        "worker_ready",
        "worker_shutting_down",
        "worker_shutdown",
    ], fired
    # Celery's thread pool has no child process: no worker_process_* signal
    detail = {name: d for name, _, d in fired}
    assert (
        detail["celeryd_init"].startswith("sender=")
        and "ok=True pool=threads" in detail["celeryd_init"]
    )
    assert "@" in detail["celeryd_init"].split()[0]
    assert detail["worker_init"] == "ok=True concurrency=2"
    assert detail["after_setup_logger"] == "root=True loglevel=20"
    assert detail["worker_ready"] == "ok=True"
    hostname = detail["celeryd_init"].split()[0].removeprefix("sender=")
    assert detail["worker_shutting_down"] == f"sender={hostname} sig=SIGTERM how=Warm exitcode=0"
    assert detail["worker_shutdown"] == "ok=True"


def test_process_pool_fires_process_signals_in_each_child(
    dsn: str, tmp_path: Path, signal_log: Path
) -> None:
    os.environ["SIGNAL_APP_OWN_LOGGING"] = "1"
    worker = run_worker(dsn, tmp_path, ["--pool", "processes", "-c", "2"], tasks=4)

    def children_done() -> bool:  # a child ends as the pool shuts down, maybe after the parent
        fired = lines(signal_log)
        started = {p for n, p, _ in fired if n == "worker_process_init"}
        ended = {p for n, p, _ in fired if n == "worker_process_shutdown"}
        return bool(started) and started == ended

    wait_for(children_done, what="every pool child's worker_process_shutdown")
    fired = lines(signal_log)
    main = [name for name, pid, _ in fired if pid == worker.pid]
    # the app takes setup_logging: Celery then sends no after_setup_logger
    assert main == [
        "celeryd_init",
        "worker_init",
        "setup_logging",
        "celeryd_after_setup",
        "worker_ready",
        "worker_shutting_down",
        "worker_shutdown",
    ], fired
    children = {pid for _, pid, _ in fired if pid != worker.pid}
    assert 1 <= len(children) <= 2, fired
    hostname = next(d for n, _, d in fired if n == "celeryd_init").split()[0]
    for child in children:
        own = [(name, d) for name, pid, d in fired if pid == child]
        # a spawned child sets up logging as the main process did, then worker_process_init;
        # worker_process_shutdown once as it exits, with its pid and exit code
        assert [name for name, _ in own] == [
            "setup_logging",
            "worker_process_init",
            "worker_process_shutdown",
        ], fired
        assert own[0][1] == "loglevel=INFO"
        assert own[1][1] == hostname
        assert own[2][1] == f"{hostname} pid={child} exitcode=0"
