"""``ujobs-bridge worker -A proj`` sizes itself from the Celery app's ``worker_concurrency`` and
``worker_prefetch_multiplier`` when the app sets them (flags still win; Celery's own defaults do
not override the bridge's), and refuses a setting that is not a positive integer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_proc import CliProc

from celery_compat import Celery
from conftest import wait_for
from ujobs_bridge import loading
from ujobs_bridge.errors import ConfigError


@pytest.fixture
def procs() -> Iterator[list[CliProc]]:
    started: list[CliProc] = []
    yield started
    for proc in started:
        proc.close()


def _ready_line(dsn: str, tmp_path: Path, procs: list[CliProc], *flags: str) -> str:
    proc = CliProc(
        ["worker", "-A", "apps.celery_worker_settings", "--dsn", dsn, *flags],
        tmp_path / f"worker{len(procs)}.log",
    )
    procs.append(proc)
    wait_for(lambda: " ready: " in proc.output(), timeout=30, what="the worker to be ready")
    proc.term()
    assert proc.wait(timeout=30) == 0, proc.output()
    return next(line for line in proc.output().splitlines() if " ready: " in line)


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
