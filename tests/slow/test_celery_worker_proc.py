"""End to end on a real worker process: a plain module app (``from celery_compat import Celery``)
run by ``python -m ujobs_bridge worker -A apps.celery_plain``; the test process only sends and
waits on results, as a web process would."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import chain, chord, group
from worker_proc import WorkerProc

from apps import celery_plain as p
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
)
from conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def all_done(dsn: str) -> bool:
    """Every row settled ``done``. A result is stored by the body, before the worker writes the
    row's outcome (in its next settle batch), so a test that has its results must still WAIT for
    the rows, never assert their states right away."""
    return {j["state"] for j in jobs(dsn)} == {"done"}


@pytest.fixture
def proc(dsn: str, tmp_path: Path) -> Iterator[WorkerProc]:
    worker = WorkerProc(dsn, "apps.celery_plain", "plain", tmp_path / "worker.log")
    try:
        with bound(p.app, dsn):
            yield worker
    finally:
        worker.close()


def test_a_plain_module_app_runs_end_to_end_on_a_worker_process(proc: WorkerProc, dsn: str) -> None:
    try:
        assert p.add.delay(2, 3).get(timeout=30) == 5
        me = p.whoami.delay().get(timeout=10)
        assert me["pid"] != os.getpid() and "@" in me["hostname"]
        assert (p.add.s(1, 2) | p.add.s(10)).delay().get(timeout=10) == 13
        assert group(p.add.s(i, i) for i in range(4)).delay().get(timeout=10) == [0, 2, 4, 6]
        assert chord(p.add.s(i, 1) for i in range(3))(p.tsum.s()).get(timeout=10) == 6
        assert (
            chain(p.add.s(1, 1), group(p.add.s(1), p.add.s(2)), p.tsum.s()).delay().get(timeout=10)
            == 7
        )
        retried: Any = p.flaky.delay(2).get(timeout=10)
        assert retried["retries"] == 2 and retried["pid"] == me["pid"]
    except BaseException:
        print(proc.output())
        raise
    assert {j["queue"] for j in jobs(dsn)} == {"plain"}
    wait_for(lambda: all_done(dsn), what="every job row done")
    proc.term()
    assert proc.wait(timeout=20) == 0


def test_a_celery_app_runs_on_the_process_pool_with_its_request_and_retries(
    dsn: str, tmp_path: Path
) -> None:
    """``--pool processes`` (Celery's prefork): the body runs in a child process, with the same
    ``self.request``, retries and results as on threads."""
    worker = WorkerProc(
        dsn,
        "apps.celery_plain",
        "plain",
        tmp_path / "worker.log",
        extra=["--pool", "processes", "-c", "2"],
    )
    try:
        with bound(p.app, dsn):
            assert p.add.delay(2, 3).get(timeout=30) == 5
            me = p.whoami.delay().get(timeout=10)
            assert me["pid"] not in (os.getpid(), worker.pid)  # a pool child, not the worker
            assert me["retries"] == 0 and "@" in me["hostname"]
            retried: Any = p.flaky.delay(2).get(timeout=20)
            assert retried["retries"] == 2
            assert chord(p.add.s(i, 1) for i in range(3))(p.tsum.s()).get(timeout=20) == 6
        wait_for(lambda: all_done(dsn), what="every job row done")
    except BaseException:
        print(worker.output())
        raise
    finally:
        worker.close()
