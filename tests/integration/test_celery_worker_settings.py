"""``ujobs-bridge worker -A proj`` sizes itself from the Celery app's ``worker_concurrency`` and
``worker_prefetch_multiplier`` and picks its pool from ``worker_pool`` when the app sets them
(flags still win; Celery's own defaults do not override the bridge's), refuses a setting that is
not a positive integer or that it cannot honour, and says which settings have no effect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_proc import CliProc

from celery_compat import Celery
from conftest import wait_for
from ujobs_bridge._internal.config import loading
from ujobs_bridge.errors import ConfigError

# ujobs_bridge.ext.loaders re-exports load_target: imported before a test patches it here, or the
# re-export would keep the patch for every later test in this process.
from ujobs_bridge.ext import loaders as _bound_first  # noqa: F401


@pytest.fixture
def procs() -> Iterator[list[CliProc]]:
    started: list[CliProc] = []
    yield started
    for proc in started:
        proc.close()


def _ready_line(
    dsn: str,
    tmp_path: Path,
    procs: list[CliProc],
    *flags: str,
    app: str = "apps.celery_worker_settings",
) -> str:
    return _started(dsn, tmp_path, procs, *flags, app=app)[0]


def _started(
    dsn: str, tmp_path: Path, procs: list[CliProc], *flags: str, app: str
) -> tuple[str, str]:
    """The worker's ready line and all it printed, started and stopped."""
    proc = CliProc(
        ["worker", "-A", app, "--dsn", dsn, *flags],
        tmp_path / f"worker{len(procs)}.log",
    )
    procs.append(proc)
    wait_for(lambda: " ready: " in proc.output(), timeout=30, what="the worker to be ready")
    proc.term()
    assert proc.wait(timeout=30) == 0, proc.output()
    return next(line for line in proc.output().splitlines() if " ready: " in line), proc.output()


def test_the_worker_takes_its_size_from_the_celery_app_and_flags_win(
    dsn: str, tmp_path: Path, procs: list[CliProc]
) -> None:
    line = _ready_line(dsn, tmp_path, procs)
    assert "concurrency=3 prefetch=2" in line
    line = _ready_line(dsn, tmp_path, procs, "-c", "5", "--prefetch-multiplier", "7")
    assert "concurrency=5 prefetch=7" in line


def test_celery_defaults_do_not_override_the_bridge_and_bad_values_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = Celery("plain_defaults")  # Celery's defaults: concurrency None (CPUs), prefetch 4
    monkeypatch.setattr(loading, "load_target", lambda spec: plain)
    assert loading.resolve("x").worker_settings() == {}  # read through the Celery loader
    assert loading.resolve("x").unregistered_dead_after_s() == 0.0  # unknown task: FAILURE
    plain.conf.worker_prefetch_multiplier = 4  # set explicitly, even to Celery's default
    assert loading.resolve("x").worker_settings() == {"prefetch_multiplier": 4}
    plain.conf.worker_max_tasks_per_child = 50
    plain.conf.worker_max_memory_per_child = 200_000
    assert loading.resolve("x").worker_settings() == {
        "prefetch_multiplier": 4,
        "max_tasks_per_child": 50,
        "max_memory_per_child": 200_000,
    }
    plain.conf.worker_concurrency = "lots"
    with pytest.raises(ConfigError, match="worker_concurrency='lots'"):
        loading.resolve("x").worker_settings()


def test_the_worker_takes_its_pool_from_the_app_says_what_has_no_effect_and_p_wins(
    dsn: str, tmp_path: Path, procs: list[CliProc]
) -> None:
    app = "apps.celery_worker_pool"
    line, printed = _started(dsn, tmp_path, procs, app=app)
    assert "concurrency=1 " in line and "pool=threads" in line  # solo: one body at a time
    assert (
        "the Celery app's worker_state_db='/var/run/celery/worker.state' has no effect here: "
        "revoked task ids are kept in Postgres" in printed
    )
    line, _ = _started(dsn, tmp_path, procs, "-P", "threads", "-c", "2", app=app)
    assert "concurrency=2 " in line and "pool=threads" in line


def test_settings_the_bridge_cannot_honour_are_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = Celery("plain_refused")
    monkeypatch.setattr(loading, "load_target", lambda spec: plain)
    plain.conf.worker_pool = "celery.concurrency.thread:TaskPool"  # a class path, Celery's way
    assert loading.resolve("x").worker_pool() == "threads"
    plain.conf.worker_autoscaler = "proj.scaling:MyAutoscaler"
    with pytest.raises(ConfigError, match=r"worker_autoscaler='proj\.scaling:MyAutoscaler'") as e:
        loading.resolve("x").worker_settings()
    assert "--autoscale MAX,MIN" in e.value.render()
    plain.conf.worker_autoscaler = "celery.worker.autoscale:Autoscaler"  # Celery's default: fine
    plain.conf.worker_direct = True
    with pytest.raises(ConfigError, match="worker_direct=True is not supported") as e:
        loading.resolve("x").worker_settings()
    assert "-Q" in e.value.render()
