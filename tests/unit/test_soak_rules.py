"""The chaos soak's rules (``bench.soak``), checked on made-up records: the seeded plan and the
at-least-once bound, so a soak that reports zeros is known to be able to report something else.
The real run is ``tests/slow/test_soak.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench is not an installed package

from bench.soak.faults import Event  # noqa: E402
from bench.soak.plan import Fault, plan  # noqa: E402
from bench.soak.producers import Ledger  # noqa: E402
from bench.soak.settings import KINDS, SoakSettings  # noqa: E402
from bench.soak.verdict import WORKLOADS, Inputs, Row, _bound  # noqa: E402


def test_the_plan_is_seeded_and_has_every_kind_often_enough() -> None:
    settings = SoakSettings(seed=3)
    first, again = plan(settings, 4), plan(settings, 4)
    assert first == again
    assert first != plan(SoakSettings(seed=4), 4)
    for kind in KINDS:
        assert sum(f.kind == kind for f in first) >= settings.min_each
    assert all(settings.warmup_s <= f.at_s <= settings.duration_s - settings.tail_s for f in first)
    assert {f.kind for f in plan(SoakSettings.small(), 4)} == set(KINDS)


def _start(
    job: str, t: float, pid: int, exec_id: str, deliveries: int = 1, ppid: int = 1
) -> dict[str, object]:
    return {
        "k": "start", "w": "plain", "job": job, "exec": exec_id, "t": t, "pid": pid,
        "ppid": ppid, "attempt": 1, "deliveries": deliveries,
    }  # fmt: skip


def _inputs(records: list[dict[str, object]], events: list[Event]) -> Inputs:
    return Inputs("", records, Ledger(), events, [], 0.0, 100.0, lease_s=10.0)


def test_the_bound_counts_only_reruns_no_fault_or_plan_explains() -> None:
    kill = Event(Fault(0, "sigkill", 0, 0, 0), t=15.0, pid=111)
    restart = Event(Fault(0, "restart-fast", 0, 1, 0), t=35.0, away_s=2.0)
    crash = Event(Fault(0, "restart-immediate", 0, 1, 0), t=60.1, away_s=2.0)
    records = [
        # a: run by 111, which was SIGKILLed, then again elsewhere: explained
        _start("a", 10.0, 111, "a1"),
        _start("a", 30.0, 222, "a2"),
        # b: failed on purpose, then ran again: the retry policy
        _start("b", 10.0, 222, "b1"),
        {"k": "end", "job": "b", "exec": "b1", "how": "raised", "t": 11.0},
        _start("b", 12.0, 222, "b2"),
        # c: ran again after a short database restart: beyond the bound
        _start("c", 32.0, 222, "c1"),
        _start("c", 40.0, 333, "c2"),
        # d: the kill hit another worker: beyond the bound
        _start("d", 10.0, 222, "d1"),
        _start("d", 20.0, 222, "d2"),
        # e: started just before a crash that lost its claim (delivered as 1 again): explained
        _start("e", 60.0, 222, "e1", deliveries=1),
        _start("e", 64.0, 222, "e2", deliveries=1),
        # f: the same crash, but the next claim was a new delivery: beyond the bound
        _start("f", 60.0, 222, "f1", deliveries=1),
        _start("f", 64.0, 222, "f2", deliveries=2),
        # g: a claim "lost" by a crash long after the run started: beyond the bound
        _start("g", 50.0, 222, "g1", deliveries=1),
        _start("g", 64.0, 222, "g2", deliveries=1),
        # h: a pool child of 111 started a body it was handed just before 111 was killed
        _start("h", 15.5, 444, "h1", ppid=111),
        _start("h", 30.0, 222, "h2", deliveries=2),
        # i: the same, but long after the kill (a child of a new parent): beyond the bound
        _start("i", 25.0, 445, "i1", ppid=111),
        _start("i", 30.0, 222, "i2", deliveries=2),
    ]
    rows = {w: Row(w) for w in WORKLOADS}
    samples: dict[str, list[str]] = {}
    _bound(_inputs(records, [kill, restart, crash]), rows, samples)
    assert rows["plain"].executions == 18
    assert rows["plain"].explained_reruns == 3
    assert rows["plain"].forgotten_claims == 1
    assert rows["plain"].beyond_bound == 5
    assert len(samples["plain beyond bound"]) == 5
    # an outage longer than the lease explains c
    restart.away_s = 12.0
    rows = {w: Row(w) for w in WORKLOADS}
    _bound(_inputs(records, [kill, restart, crash]), rows, {})
    assert rows["plain"].beyond_bound == 4
