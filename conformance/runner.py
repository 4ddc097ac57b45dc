"""Run Celery's integration tests in one target (real Celery on Redis, or the bridge) with pytest.

Why it exists: each target is one pytest subprocess in its own copy of the test tree, with its
own environment: Redis databases (broker/backend for Celery, the echo side channel for both,
never shared between the two so they can run at once), a per-test time cap and a global budget.
A run cut by the budget still has per-test outcomes (``plugin.py`` writes them as they happen);
tests it never reached are reported as ``not run``.

What it is not: the report (``report.py``) or the download (``sdist.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FILES = ("t/integration/test_tasks.py", "t/integration/test_canvas.py")
PLUGINS = {"celery": "celery.contrib.pytest", "bridge": "celery_compat.contrib.pytest"}


@dataclass
class Target:
    name: str  # "celery" or "bridge"
    tree: Path
    out: Path  # JSON lines from plugin.py
    env: dict[str, str]
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    elapsed: float = 0.0
    cut: bool = False
    returncode: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def redis_url(host: str, port: int, db: int) -> str:
    return f"redis://{host}:{port}/{db}"


def prepare(
    name: str,
    tree: Path,
    results: Path,
    *,
    redis_host: str,
    redis_port: int,
    redis_db: int,
    per_test_s: float,
    select: str | None,
    files: tuple[str, ...] = FILES,
) -> Target:
    """The command and environment of one target (``redis_db``: its first of two databases)."""
    out = results / f"{name}.jsonl"
    out.unlink(missing_ok=True)
    backend = redis_url(redis_host, redis_port, redis_db)
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(tree), str(REPO), env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
            # Celery: broker and result backend on Redis. Bridge: the same config text (a
            # celery_compat app stores results in Postgres, and reads result_backend only for a
            # task id Postgres never saw); its broker URL points at a database nobody consumes,
            # so a stray broadcast can never reach the Celery run's worker.
            "TEST_BROKER": backend,
            "TEST_BACKEND": backend,
            "REDIS_HOST": redis_host,
            "REDIS_PORT": str(redis_port),
            "UJOBS_CONFORMANCE_REDIS_DB": str(redis_db + 1),
            "UJOBS_CONFORMANCE_OUT": str(out),
            "UJOBS_CONFORMANCE_CAP": str(per_test_s),
            "WORKER_LOGLEVEL": env.get("WORKER_LOGLEVEL", "error"),
        }
    )
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(tree / "pytest.ini"),
        "--rootdir",
        str(tree),
        "-p",
        "no:cacheprovider",
        "-p",
        PLUGINS[name],
        "-p",
        "conformance.plugin",
        "--timeout",
        str(per_test_s),
        "--junitxml",
        str(results / f"{name}.xml"),
        "-q",
        "-rN",
        "--no-header",
        "-W",
        "ignore::DeprecationWarning",
    ]
    if select:
        argv += ["-k", select]
    argv += list(files)
    return Target(name, tree, out, env, argv, results / f"{name}.log")


def flush_redis(host: str, port: int, dbs: list[int]) -> None:
    """Empty the run's own Redis databases (stale broker messages or echo keys of an aborted
    run would otherwise leak into this one)."""
    from redis import StrictRedis

    for db in dbs:
        StrictRedis(host=host, port=port, db=db).flushdb()


def start(target: Target) -> None:
    target.log.parent.mkdir(parents=True, exist_ok=True)
    log = target.log.open("wb")
    target.started = time.monotonic()
    target.proc = subprocess.Popen(
        target.argv,
        cwd=target.tree,
        env=target.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()


def wait(targets: list[Target], budget_s: float) -> None:
    """Wait for every started target; one still running when its budget ends is killed."""
    pending = [t for t in targets if t.proc is not None]
    while pending:
        for t in list(pending):
            assert t.proc is not None
            code = t.proc.poll()
            over = time.monotonic() - t.started > budget_s
            if code is None and over:
                t.cut = True
                os.killpg(t.proc.pid, signal.SIGTERM)
                try:
                    code = t.proc.wait(60)  # teardown: stop the worker, drop the DB
                except subprocess.TimeoutExpired:
                    os.killpg(t.proc.pid, signal.SIGKILL)
                    code = t.proc.wait()
            if code is not None:
                t.returncode = code
                t.elapsed = time.monotonic() - t.started
                pending.remove(t)
        if pending:
            time.sleep(0.5)


def read_records(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    collected: list[str] = []
    records: list[dict[str, Any]] = []
    if not path.exists():
        return collected, records
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        if "collected" in item:
            collected = list(item["collected"])
        else:
            records.append(item)
    return collected, records


def outcomes(path: Path) -> dict[str, dict[str, Any]]:
    """Per test node id: ``status`` (passed/failed/error/skipped/xfailed/xpassed/not run),
    ``message`` (first line of the failure or skip reason) and ``duration``."""
    collected, records = read_records(path)
    out: dict[str, dict[str, Any]] = {
        n: {"status": "not run", "message": "", "duration": 0.0} for n in collected
    }
    for r in records:
        node = r["nodeid"]
        entry = out.setdefault(node, {"status": "not run", "message": "", "duration": 0.0})
        when, outcome = r["when"], r["outcome"]
        entry["duration"] = round(entry["duration"] + float(r.get("duration") or 0.0), 3)
        if when == "collect":
            entry.update(status="error", message=r.get("message", ""))
        elif r.get("subtest"):
            if outcome == "failed" and entry["status"] in ("passed", "running", "not run"):
                entry.update(status="failed", message="subtest: " + r.get("message", ""))
        elif when == "setup":
            if outcome == "failed":
                entry.update(status="error", message=r.get("message", ""))
            elif outcome == "skipped":
                entry.update(
                    status="xfailed" if r.get("xfail") else "skipped", message=r.get("message", "")
                )
            else:
                entry["status"] = "running"
        elif when == "call":
            if entry["status"] not in ("running", "not run"):
                continue  # a subtest already failed it
            if r.get("xfail"):
                entry["status"] = "xfailed" if outcome == "skipped" else "xpassed"
            else:
                entry["status"] = outcome
            entry["message"] = r.get("message", "")
        elif (
            when == "teardown"
            and outcome == "failed"
            and entry["status"] in ("passed", "xpassed", "running")
        ):
            entry.update(status="error", message="teardown: " + r.get("message", ""))
    for entry in out.values():
        if entry["status"] == "running":  # setup passed, then the run was cut
            entry["status"] = "not run"
    return out
