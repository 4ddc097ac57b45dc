"""The chaos soak's rules (``bench.soak``), checked on made-up records: the seeded plan, the
workloads' special kinds, the at-least-once bound and the columns for results thrown away,
attempts charged for bodies that never started, rows left running and slots lost, so a soak
that reports zeros is known to be able to report something else. The real run is
``tests/slow/test_soak.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench is not an installed package

from bench.soak import mix  # noqa: E402
from bench.soak.faults import Event  # noqa: E402
from bench.soak.plan import Fault, plan  # noqa: E402
from bench.soak.producers import Ledger, Producer, Sent  # noqa: E402
from bench.soak.settings import KINDS, SoakSettings  # noqa: E402
from bench.soak.verdict import (  # noqa: E402
    LOSS_COLUMNS,
    WORKLOADS,
    Attempt,
    Inputs,
    Row,
    _bound,
    _lost_results,
    _outcome,
    _running_at_end,
    _slots,
    _unstarted_charged,
)


def test_the_plan_is_seeded_and_has_every_kind_often_enough() -> None:
    settings = SoakSettings(seed=3)
    first, again = plan(settings, 4), plan(settings, 4)
    assert first == again
    assert first != plan(SoakSettings(seed=4), 4)
    for kind in KINDS:
        assert sum(f.kind == kind for f in first) >= settings.min_each
    assert all(settings.warmup_s <= f.at_s <= settings.duration_s - settings.tail_s for f in first)
    small = SoakSettings.small()
    assert {f.kind for f in plan(small, 4)} == set(KINDS)
    # an outage longer than the lease, in both profiles
    for settings_ in (settings, small):
        longs = [f for f in plan(settings_, 4) if f.kind == "restart-long"]
        assert longs and all(f.hold_s > settings_.lease_s for f in longs)


def test_the_smallest_run_sends_every_special_kind() -> None:
    small = SoakSettings.small()
    for workload, kinds in mix.SPECIALS.items():
        rate = getattr(small.rates, workload)
        producer = Producer(
            workload, rate, small.seed, lambda *a: "", mix.fail_plan, Ledger(), (20, 400)
        )
        # the items a producer sends in the first half of the small run
        drawn = {producer.draw(i)[0] for i in range(int(rate * small.duration_s / 2))}
        assert set(kinds) <= drawn, workload


def _start(
    job: str, t: float, pid: int, exec_id: str, deliveries: int = 1, ppid: int = 1
) -> dict[str, object]:
    return {
        "k": "start", "w": "plain", "job": job, "exec": exec_id, "t": t, "pid": pid,
        "ppid": ppid, "attempt": 1, "deliveries": deliveries,
    }  # fmt: skip


def _end(job: str, exec_id: str, how: str, t: float) -> dict[str, object]:
    return {"k": "end", "job": job, "exec": exec_id, "how": how, "t": t}


def _inputs(records: list[dict[str, object]], events: list[Event], **more: object) -> Inputs:
    return Inputs("", records, Ledger(), events, [], 0.0, 100.0, lease_s=10.0, **more)  # type: ignore[arg-type]


def test_the_bound_counts_only_reruns_no_fault_or_plan_explains() -> None:
    kill = Event(Fault(0, "sigkill", 0, 0, 0), t=15.0, pid=111)
    restart = Event(Fault(0, "restart-fast", 0, 1, 0), t=35.0, away_s=2.0)
    crash = Event(Fault(0, "restart-immediate", 0, 1, 0), t=60.1, away_s=2.0)
    freeze = Event(Fault(0, "sigstop", 0, 5, 0), t=20.0, pid=555, away_s=5.0)
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
        # j: handed to a pool child of 555 before 555 was frozen, started on the thaw (its
        # lease ran out meanwhile), then run again elsewhere: explained
        _start("j", 25.5, 556, "j1", ppid=555),
        _start("j", 27.0, 222, "j2", deliveries=2),
    ]
    rows = {w: Row(w) for w in WORKLOADS}
    samples: dict[str, list[str]] = {}
    _bound(_inputs(records, [kill, restart, crash, freeze]), rows, samples)
    assert rows["plain"].executions == 20
    assert rows["plain"].explained_reruns == 4
    assert rows["plain"].forgotten_claims == 1
    assert rows["plain"].beyond_bound == 5
    assert len(samples["plain beyond bound"]) == 5
    # an outage longer than the lease explains c
    restart.away_s = 12.0
    rows = {w: Row(w) for w in WORKLOADS}
    _bound(_inputs(records, [kill, restart, crash, freeze]), rows, {})
    assert rows["plain"].beyond_bound == 4
    # without the freeze, j is beyond the bound
    rows = {w: Row(w) for w in WORKLOADS}
    _bound(_inputs(records, [kill, restart, crash]), rows, {})
    assert rows["plain"].beyond_bound == 5


def test_the_edge_columns_count_results_thrown_away_unstarted_charges_running_rows_and_slots() -> (
    None
):
    long_outage = Event(Fault(0, "restart-long", 0, 8, 0), t=20.0, away_s=8.0)
    kill = Event(Fault(0, "sigkill-full", 0, 0, 0), t=50.0, pid=111)
    records = [
        # r1: returned, its attempt recorded done
        _start("r1", 10.0, 222, "r1a"),
        _end("r1", "r1a", "ok", 10.5),
        # r2: returned during an outage longer than the lease; the attempt it ran in was
        # rescued as lost (its result thrown away) and a second run made the job done
        _start("r2", 19.0, 222, "r2a"),
        _end("r2", "r2a", "ok", 21.0),
        _start("r2", 33.5, 333, "r2b", deliveries=2),
        _end("r2", "r2b", "ok", 34.0),
        # r3: returned by 111 just before it was SIGKILLed: nothing written, explained
        _start("r3", 48.5, 111, "r3a"),
        _end("r3", "r3a", "ok", 49.5),
        # r4: returned by a pool child of 111 just before 111 was SIGKILLed: explained
        _start("r4", 48.6, 444, "r4a", ppid=111),
        _end("r4", "r4a", "ok", 49.6),
        # r5, r6: prefetched by 111, never started; r5 was charged, r6 handed back uncounted
        # the slot probes at the end: jobs-threads ran 3 bodies at once of its 4
        {"k": "probe", "worker": "jobs-threads", "seen": 3},
        {"k": "probe", "worker": "jobs-threads", "seen": 1},
        {"k": "probe", "worker": "jobs-procs", "seen": 2},
        {"k": "probe", "worker": "celery-threads", "seen": 4},
    ]
    attempts = [
        Attempt("r1", 1, "jobs-threads@soak:222", 9.9, 11.0, "done"),
        Attempt("r2", 1, "jobs-threads@soak:222", 18.9, 33.0, "lost", "UJ_WORKER_LOST"),
        Attempt("r2", 2, "jobs-threads@soak:333", 33.1, 34.5, "done"),
        Attempt("r3", 1, "jobs-threads@soak:111", 48.0, 60.0, "lost", "UJ_WORKER_LOST"),
        Attempt("r4", 1, "jobs-procs@soak:111", 48.0, 60.0, "lost", "UJ_WORKER_LOST"),
        Attempt("r5", 1, "jobs-threads@soak:111", 48.0, 60.0, "lost", "UJ_WORKER_LOST"),
        Attempt("r6", 1, "jobs-threads@soak:111", 48.0, 60.0, "handed_back"),
    ]
    names = {f"r{i}": "bench.soak.jobs.plain" for i in range(1, 7)}
    jobs_app, celery_app = "bench.soak.jobs", "bench.soak.celery_tasks"
    inputs = _inputs(
        records,
        [long_outage, kill],
        running=[("r7", "soak.task", "celery-threads@soak:555")],
        concurrency={"jobs-threads": 4, "jobs-procs": 2, "celery-threads": 4},
        apps={"jobs-threads": jobs_app, "jobs-procs": jobs_app, "celery-threads": celery_app},
        attempts=attempts,
    )
    rows = {w: Row(w) for w in WORKLOADS}
    samples: dict[str, list[str]] = {}
    _lost_results(inputs, attempts, rows, samples)
    _unstarted_charged(inputs, attempts, names, rows, samples)
    _running_at_end(inputs, rows, samples)
    slots = _slots(inputs, rows, samples)
    assert rows["plain"].lost_results == 1 and "job r2" in samples["plain lost results"][0]
    assert rows["plain"].unstarted_charged == 1
    assert "job r5" in samples["plain unstarted charged"][0]
    assert rows["celery"].running_at_end == 1 and rows["plain"].running_at_end == 0
    assert slots["jobs-threads"] == {"concurrency": 4, "live": 3}
    # a worker's lost slot counts against every workload it runs
    assert [rows[w].slots_lost for w in WORKLOADS] == [1, 1, 0, 0, 1]
    for column in ("lost_results", "unstarted_charged", "running_at_end", "slots_lost"):
        assert column in LOSS_COLUMNS

    # A body handed to a pool child of 555 just before 555 was SIGSTOPped starts on the thaw,
    # after the rescue that charged its attempt: it ran in that attempt (t1). One that starts
    # long after the thaw (t2) or under another attempt number (t3) did not.
    freeze = Event(Fault(0, "sigstop", 0, 4.5, 0), t=70.0, pid=555, away_s=4.5)
    thawed = [
        _start("t1", 74.6, 666, "t1a", ppid=555),
        _start("t2", 80.0, 666, "t2a", ppid=555),
        {**_start("t3", 74.6, 666, "t3a", ppid=555), "attempt": 2},
    ]
    charged = [
        Attempt(j, 1, "celery-procs@soak:555", 69.0, 74.2, "lost") for j in ("t1", "t2", "t3")
    ]
    rows = {w: Row(w) for w in WORKLOADS}
    samples = {}
    _unstarted_charged(
        _inputs(thawed, [freeze]), charged, dict.fromkeys(("t1", "t2", "t3"), "soak.migrated"),
        rows, samples,
    )  # fmt: skip
    assert rows["migrated"].unstarted_charged == 2
    assert "job t2" in samples["migrated unstarted charged"][0]
    assert "job t3" in samples["migrated unstarted charged"][1]

    # without the kill, r3's and r4's results were thrown away too (a pool child's own pid
    # is not its worker's: its parent's is)
    rows = {w: Row(w) for w in WORKLOADS}
    _lost_results(_inputs(records, [long_outage]), attempts, rows, {})
    assert rows["plain"].lost_results == 3


def test_planned_ends_of_the_special_kinds() -> None:
    def job(state: str, error: str | None) -> dict[str, tuple[object, ...]]:
        return {"j": ("j", "bench.soak.jobs.plain", state, None, error)}

    def sent(plan_: int) -> Sent:
        return Sent("plain", "j", plan_, 0.0)

    too_large = "UJ_OUTPUT_TOO_LARGE: the result of job ... is over the limit"
    assert _outcome(sent(mix.OVERSIZE), job("dead", too_large), {}, [])[0] == "planned"
    assert _outcome(sent(0), job("dead", too_large), {}, [])[0] == "infra"
    cancelled = "UJ_JOB_CANCELLED: a year-10000 row, cancelled by the soak"
    assert _outcome(sent(mix.YEAR_10000), job("cancelled", cancelled), {}, [])[0] == "planned"
    # cancelled by hand because the introspector failed on it: counted
    failed = ["j: DataError: timestamp out of range"]
    assert _outcome(sent(mix.YEAR_10000), job("cancelled", None), {}, failed)[0] == "lost"
