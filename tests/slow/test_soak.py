"""The chaos soak (``python -m bench.soak``): its rules, and a small run that must lose nothing.

Why it exists: a soak anyone can run is the project's evidence that faults lose nothing, and its
small version runs with the suite. The small run is a real one: its own Postgres cluster (restarted ``-m fast`` and
``-m immediate``, once for longer than the lease, backends terminated), real worker processes
(SIGKILLed, once with every slot and prefetched place full, SIGSTOPped), two schedulers,
``migrate --follow`` on Redis db 8, every fault kind once on a seeded plan, every special kind
of job (an oversize result, hung bodies with retries, an exception that cannot be shown,
instants at the edges of the range and rows set by hand to ``-infinity``, 1 BC and year 10000),
and a settle deadline far above what a loaded machine needs. It asserts zeros in every loss
column: among them no finished result thrown away, no attempt charged for a body that never
started, no row left running and no worker slot lost.
The rules themselves (the seeded plan, the at-least-once bound) are checked on made-up records
first, so a soak that reports zeros is known to be able to report something else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ujobs_bridge.testing import redis_url
from ujobs_bridge.testing.cluster import binaries
from ujobs_bridge.testing.pytest import in_ci

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = redis_url(8)  # the soak's ``migrate --follow`` source: this run's own Redis
sys.path.insert(0, str(ROOT))  # bench is not an installed package

from bench.soak import mix  # noqa: E402
from bench.soak.settings import KINDS  # noqa: E402
from bench.soak.verdict import LOSS_COLUMNS  # noqa: E402


def _needs(what: str, ok: bool) -> None:
    """A missing service skips locally with the reason, and fails under CI."""
    if not ok:
        if in_ci():
            raise AssertionError(f"the soak needs {what}")
        pytest.skip(f"the soak needs {what}")


def _redis_answers() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_timeout=5).ping())
    except redis.RedisError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.xdist_group("soak")  # on a worker of its own, started first (the longest test)
def test_a_small_soak_loses_nothing(tmp_path: Path) -> None:
    _needs("PostgreSQL server binaries (initdb, pg_ctl)", binaries() is not None)
    _needs(f"Redis at {REDIS_URL}", _redis_answers())
    out = tmp_path / "soak.json"
    env = dict(os.environ, SOAK_REDIS_URL=REDIS_URL)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--small", "--json-out", str(out),
         "--log-dir", str(tmp_path / "logs")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    print(done.stdout[-12000:], done.stderr[-4000:])
    figures = json.loads(out.read_text())
    for workload, row in figures["rows"].items():
        assert row["enqueued"] > 0, workload
        assert row["done"] > 0, workload
        for column in LOSS_COLUMNS:
            assert not row[column], (workload, column, figures["samples"])
    for kind in KINDS:
        assert figures["recovery"][kind]["count"] >= 1, kind
        assert not figures["recovery"][kind]["errors"], kind
    for fault in figures["faults"]:
        if fault["kind"] == "sigkill-full":  # killed with every slot and prefetched place full
            assert fault["pid"] and not fault["error"], fault
            assert fault["extra"]["full"], fault
    sent = figures["other"]["specials"]
    for workload, kinds in mix.SPECIALS.items():
        for kind in kinds:
            assert sent.get(f"{workload} {mix.NAMES[kind]}"), (workload, kind, sent)
    assert done.returncode == 0, done.returncode  # the command counts them all
