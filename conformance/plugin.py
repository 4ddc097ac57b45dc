"""pytest plugin loaded into both conformance runs (``-p conformance.plugin``).

Why it exists: the runner needs per-test outcomes even when a run is cut short by its budget
(JUnit XML is only written at the end), a per-test time cap that also bounds tests Celery marks
with ``timeout(300)``, and one Redis side channel per run so the two runs can go at once.

* every report is appended to ``$UJOBS_CONFORMANCE_OUT`` (JSON lines) as it happens, and the
  collected node ids once collection ends;
* ``$UJOBS_CONFORMANCE_CAP`` seconds caps every test's ``timeout`` marker;
* SIGTERM (the runner's budget) unwinds like Ctrl-C, so the run's database is still dropped;
* the per-test alarm keeps working through subtests: pytest-timeout cancels it when a subtest
  fails (its pdb guard) and a timeout raised inside ``subtests.test()`` is swallowed by the
  subtest, so without this the next un-timed ``get()`` of that test would block the whole run.
  The alarm is put back for the rest of the test's time, and once fired fires again every
  ``REARM_S`` seconds;
* ``t.integration.tasks.get_redis_connection`` (the echo/count side channel of Celery's tasks)
  is pointed at Redis database ``$UJOBS_CONFORMANCE_REDIS_DB`` (the run's result-backend
  database, shared as in Celery's own CI) before any conftest imports it.

What it is not: a change to what the tests assert; only where the side channel lives.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

OUT = os.environ.get("UJOBS_CONFORMANCE_OUT")
REARM_S = 5.0
_STACKS: Any = None
_PHASE = {"running": 0, "reporting": 0}
_ALARMS: dict[str, tuple[float, Any]] = {}  # running test → (deadline, its re-arming handler)


def _write(record: dict[str, Any]) -> None:
    if not OUT:
        return
    with open(OUT, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, default=str) + "\n")


def _patch_side_channel() -> None:
    db = os.environ.get("UJOBS_CONFORMANCE_REDIS_DB")
    if db is None:
        return
    from t.integration import tasks

    def get_redis_connection() -> Any:
        from redis import StrictRedis

        host = os.environ.get("REDIS_HOST", "localhost")
        port = int(os.environ.get("REDIS_PORT", "6379"))
        return StrictRedis(host=host, port=port, db=int(db), socket_timeout=None)

    tasks.get_redis_connection = get_redis_connection


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: Any) -> None:
    _patch_side_channel()
    # The runner ends a run past its budget with SIGTERM: unwind as for Ctrl-C, so session
    # fixtures still stop the worker and drop the run's database.
    signal.signal(signal.SIGTERM, _interrupted)
    if OUT:  # `kill -USR1 <pytest pid>` writes every thread's stack next to the outcomes
        global _STACKS
        _STACKS = open(OUT + ".stacks", "w")  # noqa: SIM115 - lives as long as the process
        faulthandler.register(signal.SIGUSR1, all_threads=True, file=_STACKS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cap = os.environ.get("UJOBS_CONFORMANCE_CAP")
    if cap:
        for item in items:
            marker = item.get_closest_marker("timeout")
            current = None
            if marker is not None:
                current = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
            limit = float(cap) if current is None else min(float(current), float(cap))
            item.add_marker(pytest.mark.timeout(limit), append=False)


def _timeout_of(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    value = None
    if marker is not None:
        value = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
    if value is None:
        value = item.config.getoption("timeout", None)
    return float(value) if value else None


def _install_rearming(item: pytest.Item) -> None:
    """Wrap the SIGALRM handler pytest-timeout installed for this test: once fired it fires
    again every ``REARM_S`` seconds, and it only ever raises inside test code (setup, call,
    teardown), never while pytest builds or writes a report (an exception there ends the run)."""
    handler = signal.getsignal(signal.SIGALRM)
    timeout = _timeout_of(item)
    if not callable(handler) or timeout is None:
        return

    def rearming(signum: int, frame: Any) -> None:
        if not _PHASE["running"] or _PHASE["reporting"]:
            signal.setitimer(signal.ITIMER_REAL, 0.2)  # outside test code: a little later
            return
        signal.setitimer(signal.ITIMER_REAL, REARM_S)
        handler(signum, frame)

    signal.signal(signal.SIGALRM, rearming)
    _ALARMS[item.nodeid] = (time.monotonic() + timeout, rearming)


@contextlib.contextmanager
def _phase(key: str) -> Iterator[None]:
    _PHASE[key] += 1
    try:
        yield
    finally:
        _PHASE[key] -= 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _install_rearming(item)
    with _phase("running"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _phase("running"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _phase("running"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    with _phase("reporting"):
        yield


@pytest.hookimpl(trylast=True)
def pytest_exception_interact(node: Any, call: Any, report: Any) -> None:
    """pytest-timeout cancels its alarm on any reported exception (for pdb), and a failed
    ``subtests.test()`` reports one while the test goes on: put the alarm back for what is
    left of the test's time."""
    armed = _ALARMS.get(getattr(node, "nodeid", ""))
    if armed is None or type(report).__name__ != "SubtestReport":
        return
    deadline, handler = armed
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 0.5))


def pytest_collection_finish(session: pytest.Session) -> None:
    _write({"collected": [item.nodeid for item in session.items]})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write(
            {
                "nodeid": report.nodeid,
                "when": "collect",
                "outcome": "failed",
                "message": _message(report),
            }
        )


def _message(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(longrepr or "")
    lines = [line for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        _ALARMS.pop(report.nodeid, None)
    record: dict[str, Any] = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": round(report.duration, 3),
        "subtest": type(report).__name__ == "SubtestReport",
    }
    if hasattr(report, "wasxfail"):
        record["xfail"] = True
    if report.failed or report.skipped:
        record["message"] = _message(report)
    _write(record)
