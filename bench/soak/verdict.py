"""From what ran, what was sent, what was broken and what the database says, to the figures.

Why it exists: each loss column needs a precise rule, written once:

- **enqueued**: sends that returned (``producers.Ledger``); for the scheduler, the fires
  (``x_scheduler_fires``) of occurrences up to the end of the run.
- **done**: the job row is ``done`` with the expected result (plain: its key; steps: 6); a
  Celery task's stored result is ``SUCCESS`` with ``{"key": ...}``.
- **dead (planned)**: a poison item that ended ``dead`` / ``FAILURE`` with ``PlannedPoison``.
- **infra dead/failed**: anything else that ended ``dead`` / ``FAILURE`` (``UJ_WORKER_LOST``, a
  connection error...): the job was charged for our faults.
- **lost**: enqueued, and neither done nor dead after the settle (still ready or running, a
  missing row or result, or a wrong result).
- **beyond bound**: executions a job row (one message) had beyond the at-least-once bound.
  Executions of a row, in start order e1..en: each ei before the last must be explained by a
  planned failure (its ``end`` record says ``raised``/``retry``) or by a fault that could have
  cut it short: a SIGKILL or SIGSTOP of the process that ran it (its pid, or its pool's
  parent) between the start of ei and the start of e(i+1) (a SIGKILL of the parent up to
  ``CHILD_LAG_S`` before the start: a pool child may start a body it was handed before it
  notices its parent died; a SIGSTOP that ended up to ``CHILD_LAG_S`` before the start: a body
  handed over before the freeze starts on the thaw), a database outage longer than
  the lease in that window, or a claim the database forgot: e(i+1) was claimed with a
  delivery number no higher than ei's (``deliveries`` is counted by every claim and never
  given back) and a crash (``restart -m immediate``) came at most ``CLAIM_LAG_S`` after ei
  started (and at most ``PREFETCH_WAIT_S`` before: the claim preceded the start). The
  worker's claims commit asynchronously by design (``db/sql/session.sql``), so a crash can
  lose the last fraction of a second of them and the job runs again. Anything else (a body re-run after a database restart or a terminated
  backend, which the engine promises to ride out) counts.
- **steps re-run**: a step function that started after its step row was committed
  (``x_job_steps.completed_at`` is the commit transaction's ``now()``, later than the first
  run's start and earlier than any run that started after the commit).
- **double fires**: occurrences of ``soak-tick`` with more than one job row; **misses**:
  occurrences on its grid from the first fire to the end of the run with no fire.
- **stuck leases**: ``running`` rows whose lease has expired, read after the workers stopped.
- **lost results**: executions whose body returned (``end`` ``ok``) while the attempt they ran
  in (the ``x_job_attempts`` row of that job whose worker is the process that ran it, or its
  pool's parent, claimed before the start and ended after it) was not recorded ``done``: the
  result was thrown away. Only a fault that cut that process off explains it (a SIGKILL or
  SIGSTOP of it after the start, or just before it as for the bound: its result may not have
  been written yet), or a claim the database forgot in a crash (no attempt row at all, a crash
  within the claim's lag, as for the bound). A database outage of any length does not.
- **unstarted charged**: attempts charged to a job (``x_job_attempts`` outcome ``lost``,
  ``retried``, ``dead`` or ``done``; not ``handed_back``, ``snoozed`` or ``cancelled``) that
  no execution ran in (no ``start`` of that job by that worker, or a child of it, between the
  claim and the attempt's end): a job charged for a body that never started. A body handed
  over before a SIGSTOP of its worker starts only on the thaw, after the rescue that charged
  it: a ``start`` of the same attempt number by that worker up to ``CHILD_LAG_S`` after the
  thaw of a freeze that began within the attempt ran in it (as for the bound).
- **running at end**: rows still ``running`` once the settle is over (the workers still up).
- **slots lost**: for each worker, its concurrency minus the most slot probes it ran at once
  at the end (``marks.probe``); a workload's figure is the sum over the workers that run it.
- **recovery** per fault kind: from the fault to the first settle after it: for a worker fault,
  the first ``finished_at`` among the jobs that worker held; for a database fault, the first
  ``finished_at`` of any job after the fault began.

What it is not: printing (``table``) or collecting (``run``).
"""

from __future__ import annotations

import bisect
import itertools
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import psycopg

from . import mix
from .faults import Event
from .fleet import Slot
from .jobs import STEPS, TICK_S
from .producers import Ledger, Sent
from .settings import KINDS

WORKLOADS = ("plain", "steps", "celery", "migrated", "scheduler")
JOB_NAMES = {
    "bench.soak.jobs.plain": "plain",
    "bench.soak.jobs.hang": "plain",
    "bench.soak.jobs.stepped": "steps",
    "bench.soak.jobs.tick": "scheduler",
    "soak.task": "celery",
    "soak.migrated": "migrated",
}
LOSS_COLUMNS = (
    "lost",
    "beyond_bound",
    "steps_rerun",
    "infra_dead",
    "double_fires",
    "misses",
    "stuck",
    "lost_results",
    "unstarted_charged",
    "running_at_end",
    "slots_lost",
)
# the workloads each worker app runs (a worker's lost slots count against them)
APP_WORKLOADS = {
    "bench.soak.jobs": ("plain", "steps", "scheduler"),
    "bench.soak.celery_tasks": ("celery", "migrated"),
}
PROCESS_FAULTS = ("sigkill", "sigkill-full", "sigstop")
KILLS = ("sigkill", "sigkill-full")
DB_FAULTS = ("terminate", "restart-fast", "restart-immediate", "restart-long")
CRASHES = ("restart-immediate", "restart-long")  # -m immediate: the server forgets async commits
# attempts that count against max_attempts (handed_back, snoozed, cancelled do not)
CHARGED = ("lost", "retried", "dead", "done")
ATTEMPT_SLACK_S = 0.01  # the clock's grain between a claim's now() and a body's time.time()
FAULT_WINDOW_S = 2.0
# A claim committed asynchronously is flushed within 3 x wal_writer_delay (200 ms) by
# PostgreSQL: a crash can lose it only that soon after it. The claim came before its body
# started (at most PREFETCH_WAIT_S before, waiting in the worker's prefetch), so the crash came
# between PREFETCH_WAIT_S before the start and CLAIM_LAG_S (generous for a loaded machine) after.
CLAIM_LAG_S = 2.0
CHILD_LAG_S = 2.0
PREFETCH_WAIT_S = 60.0  # after a database fault's end, sends may still meet its aftermath


@dataclass
class Row:
    workload: str
    enqueued: int = 0
    done: int = 0
    dead_planned: int = 0
    lost: int = 0
    beyond_bound: int = 0
    steps_rerun: int | None = None
    infra_dead: int = 0
    double_fires: int | None = None
    misses: int | None = None
    stuck: int = 0
    lost_results: int = 0
    unstarted_charged: int = 0
    running_at_end: int = 0
    slots_lost: int = 0
    executions: int = 0
    explained_reruns: int = 0
    forgotten_claims: int = 0  # of which: a claim the server lost in a crash


@dataclass
class Verdict:
    rows: dict[str, Row]
    recovery: dict[str, dict[str, Any]]
    samples: dict[str, list[str]] = field(default_factory=dict)
    other: dict[str, Any] = field(default_factory=dict)

    @property
    def losses(self) -> int:
        return sum(int(getattr(r, c) or 0) for r in self.rows.values() for c in LOSS_COLUMNS)


@dataclass
class Inputs:
    dsn: str
    records: list[dict[str, Any]]
    ledger: Ledger
    events: list[Event]
    slots: list[Slot]
    t_start: float
    t_end: float
    lease_s: float
    running: list[tuple[str, str, str | None]] = field(default_factory=list)  # id, name, holder
    concurrency: dict[str, int] = field(default_factory=dict)  # worker -> -c
    apps: dict[str, str] = field(default_factory=dict)  # worker -> -A
    readers: list[str] = field(default_factory=list)  # the introspector's failures on far rows
    attempts: list[Attempt] | None = None  # None: read from the database


@dataclass(frozen=True)
class Attempt:
    """One ``x_job_attempts`` row, times as epoch seconds."""

    job: str
    attempt: int
    worker: str | None
    claimed_at: float | None
    finished_at: float
    outcome: str
    error: str | None = None

    @property
    def pid(self) -> int | None:
        """The worker's pid (``-n`` workers are ``<node>:<pid>``)."""
        tail = (self.worker or "").rpartition(":")[2]
        return int(tail) if tail.isdigit() else None


def _db(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        jobs = conn.execute(
            "select id::text, name, state, output, last_error, extract(epoch from finished_at),"
            " input->'kwargs'->>'occurrence',"
            " state = 'running' and lease_expires_at < now()"
            " from x_jobs"
        ).fetchall()
        steps = conn.execute(
            "select run_id::text, name, extract(epoch from completed_at) from x_job_steps"
            " where status = 'completed'"
        ).fetchall()
        tasks = conn.execute(  # every Celery row keeps its task id (and retries) in its input
            "select coalesce(input -> 'headers' ->> 'id', input ->> 'id'),"
            " coalesce((input -> 'headers' ->> 'retries')::int, 0), id::text"
            " from x_jobs where enqueued_by = 'celery_compat'"
        ).fetchall()
        results = conn.execute(
            "select key, value from x_celery_results where key like 'celery-task-meta-%'"
        ).fetchall()
        fires = conn.execute(
            "select extract(epoch from occurrence_at), job_ids::text[] from x_scheduler_fires"
            " where task = 'soak-tick'"
        ).fetchall()
        attempts = conn.execute(
            "select job_id::text, attempt, worker, extract(epoch from claimed_at)::float8,"
            " extract(epoch from finished_at)::float8, outcome, error from x_job_attempts"
        ).fetchall()
    return {
        "jobs": jobs,
        "steps": steps,
        "tasks": tasks,
        "results": results,
        "fires": fires,
        "attempts": [Attempt(*a) for a in attempts],
    }


def judge(inputs: Inputs) -> Verdict:
    db = _db(inputs.dsn)
    rows = {w: Row(w) for w in WORKLOADS}
    rows["steps"].steps_rerun = 0
    rows["scheduler"].double_fires = 0
    rows["scheduler"].misses = 0
    samples: dict[str, list[str]] = defaultdict(list)

    jobs = {j[0]: j for j in db["jobs"]}
    by_task: dict[str, list[str]] = defaultdict(list)
    for task_id, _retries, job_id in db["tasks"]:
        by_task[task_id].append(job_id)
    results = {}
    for key, value in db["results"]:
        try:
            results[key[len("celery-task-meta-") :]] = json.loads(value)
        except ValueError:
            results[key[len("celery-task-meta-") :]] = {"status": "UNREADABLE"}

    # ---- outcomes of what was enqueued
    for sent in inputs.ledger.sent:
        row = rows[sent.workload]
        row.enqueued += 1
        outcome, detail = _outcome(sent, jobs, results, inputs.readers)
        if outcome == "lost" and sent.workload in ("celery", "migrated"):
            detail += "; its rows: " + (
                ", ".join(
                    f"{i} {jobs[i][2]} {(jobs[i][4] or '')[:160]}".strip()
                    for i in by_task.get(sent.ref, [])
                    if i in jobs
                )
                or "none"
            )
        _count(row, outcome)
        if outcome in ("lost", "infra"):
            samples[f"{sent.workload} {outcome}"].append(f"{sent.ref}: {detail}")

    # ---- the scheduler: fires up to the end of the run
    sched = rows["scheduler"]
    fired = sorted((float(at), ids) for at, ids in db["fires"])
    in_run = [(at, ids) for at, ids in fired if at <= inputs.t_end]
    for at, ids in in_run:
        sched.enqueued += 1
        states = [jobs[i][2] if i in jobs else "missing" for i in ids]
        if states and all(s == "done" for s in states):
            sched.done += 1
        elif any(s == "dead" for s in states):
            sched.infra_dead += 1
            samples["scheduler infra"].append(f"{at}: {states}")
        else:
            sched.lost += 1
            samples["scheduler lost"].append(f"{at}: {states}")
    if in_run:
        first = round(in_run[0][0])
        have = {round(at) for at, _ in fired}
        grid = range(first, int(inputs.t_end) + 1, TICK_S)
        missing = [g for g in grid if g not in have]
        sched.misses = len(missing)
        samples["scheduler misses"].extend(str(g) for g in missing[:20])
    per_occurrence = Counter(j[6] for j in db["jobs"] if JOB_NAMES.get(j[1]) == "scheduler")
    sched.double_fires = sum(1 for n in per_occurrence.values() if n > 1)

    # ---- stuck leases, by workload
    for j in db["jobs"]:
        if j[7]:
            rows[JOB_NAMES.get(j[1], "plain")].stuck += 1
            samples["stuck"].append(j[0])

    # ---- executions beyond the at-least-once bound
    _bound(inputs, rows, samples)

    # ---- results thrown away, attempts charged for nothing, rows left running, slots gone
    attempts = inputs.attempts if inputs.attempts is not None else db["attempts"]
    names = {j[0]: j[1] for j in db["jobs"]}
    _lost_results(inputs, attempts, rows, samples)
    _unstarted_charged(inputs, attempts, names, rows, samples)
    _running_at_end(inputs, rows, samples)
    slots = _slots(inputs, rows, samples)
    if inputs.readers:
        samples["introspector on far rows"].extend(inputs.readers)

    # ---- persisted steps re-run
    committed = {(run, name): float(at) for run, name, at in db["steps"]}
    for rec in inputs.records:
        if rec.get("k") != "step":
            continue
        persisted = committed.get((rec["job"], rec["step"]))
        if persisted is not None and rec["t"] > persisted:
            rows["steps"].steps_rerun = (rows["steps"].steps_rerun or 0) + 1
            samples["steps re-run"].append(f"{rec['job']} {rec['step']} pid {rec['pid']}")

    finished = sorted(float(j[5]) for j in db["jobs"] if j[5] is not None)
    finished_at = {j[0]: float(j[5]) for j in db["jobs"] if j[5] is not None}
    return Verdict(
        rows=rows,
        recovery=_recovery(inputs.events, finished, finished_at),
        samples=dict(samples),
        other={**_other(inputs), "slots": slots},
    )


def _outcome(
    sent: Sent, jobs: dict[str, Any], results: dict[str, dict[str, Any]], readers: list[str]
) -> tuple[str, str]:
    if sent.workload in ("celery", "migrated"):
        meta = results.get(sent.ref)
        if meta is None:
            return "lost", "no result"
        status = meta.get("status")
        value = meta.get("result")
        if status == "SUCCESS":
            ok = isinstance(value, dict) and "key" in value
            return ("done", "") if ok else ("lost", f"SUCCESS with {value!r}")
        if status == "FAILURE":
            kind = value.get("exc_type") if isinstance(value, dict) else None
            if kind == "PlannedPoison" and sent.plan == mix.POISON:
                return "planned", ""
            return "infra", f"FAILURE {str(value)[:300]}"
        return "lost", f"status {status}"
    job = jobs.get(sent.ref)
    if job is None:
        return "lost", "no row"
    _id, _name, state, output, last_error = job[:5]
    if state == "done":
        expected: Any = sum(range(1, STEPS + 1)) if sent.workload == "steps" else None
        if expected is not None and output != expected:
            return "lost", f"done with {output!r}"
        return "done", ""
    error = last_error or ""
    if state == "dead":
        if sent.workload == "plain" and (
            (sent.plan == mix.POISON and "PlannedPoison" in error)
            or (sent.plan == mix.OVERSIZE and "UJ_OUTPUT_TOO_LARGE" in error)
        ):
            return "planned", ""
        return "infra", f"dead: {error[:300]}"
    if state == "cancelled" and sent.plan == mix.YEAR_10000:
        if "UJ_JOB_CANCELLED" in error:  # by the introspector, as `jobs cancel` does
            return "planned", ""
        failed = [r for r in readers if r.startswith(sent.ref)]
        return "lost", f"cancelled by hand: the introspector failed: {failed}"
    return "lost", f"state {state}"


def _count(row: Row, outcome: str) -> None:
    if outcome == "done":
        row.done += 1
    elif outcome == "planned":
        row.dead_planned += 1
    elif outcome == "infra":
        row.infra_dead += 1
    else:
        row.lost += 1


def _bound(inputs: Inputs, rows: dict[str, Row], samples: dict[str, list[str]]) -> None:
    starts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ends: dict[str, dict[str, Any]] = {}
    for rec in inputs.records:
        if rec.get("k") == "start":
            starts[rec["job"]].append(rec)
        elif rec.get("k") == "end":
            ends[rec["exec"]] = rec
    process = [e for e in inputs.events if e.fault.kind in PROCESS_FAULTS and e.pid]
    crashes = [e for e in inputs.events if e.fault.kind in CRASHES]
    long_outages = [
        e
        for e in inputs.events
        if e.fault.kind.startswith("restart") and (e.away_s or 0) > inputs.lease_s
    ]
    for job, runs in starts.items():
        runs.sort(key=lambda r: r["t"])
        row = rows.get(runs[0]["w"])
        if row is None:
            continue
        row.executions += len(runs)
        for e, nxt in itertools.pairwise(runs):
            end = ends.get(e["exec"])
            if end is not None and end["how"] in ("raised", "retry", "oversize"):
                continue
            if e.get("hang"):  # blocked past its timeout on purpose (a pool child is killed)
                continue
            window = (e["t"], nxt["t"])
            hit = [f for f in process if _cut_short(e, f, window)]
            hit += [f for f in long_outages if window[0] <= f.t <= window[1]]
            lost_in = (e["t"] - PREFETCH_WAIT_S, e["t"] + CLAIM_LAG_S)
            if _claim_forgotten(e, nxt) and any(lost_in[0] <= f.t <= lost_in[1] for f in crashes):
                row.forgotten_claims += 1
                hit.append(crashes[0])
            if hit:
                row.explained_reruns += 1
                continue
            row.beyond_bound += 1
            how = end["how"] if end is not None else "no end record"
            samples.setdefault(f"{row.workload} beyond bound", []).append(
                f"job {job}: run at {e['t']:.2f} by pid {e['pid']} (attempt {e.get('attempt')}, "
                f"delivery {e.get('deliveries')}, {how}), again at {nxt['t']:.2f} by pid "
                f"{nxt['pid']} (attempt {nxt.get('attempt')}, delivery {nxt.get('deliveries')});"
                " faults between: "
                + ", ".join(
                    f"{f.fault.kind}@{f.t:.2f}"
                    for f in inputs.events
                    if window[0] <= f.t <= window[1]
                )
            )


def _cut_short(e: dict[str, Any], f: Event, window: tuple[float, float]) -> bool:
    """A signal to the process that ran ``e`` (or to its pool's parent) in its window. Two
    signals before the start count too: a SIGKILL of a pool child's parent up to
    ``CHILD_LAG_S`` before it (the child may start a body it was handed before it notices that
    its parent is gone), and a SIGSTOP that ended up to ``CHILD_LAG_S`` before it (a body handed
    over before the freeze starts on the thaw, though the lease ran out meanwhile)."""
    if f.pid not in (e["pid"], e["ppid"]):
        return False
    lo = window[0]
    if f.fault.kind == "sigstop":
        lo -= (f.away_s if f.away_s is not None else f.fault.hold_s) + CHILD_LAG_S
    elif f.pid == e["ppid"] and f.fault.kind in KILLS:
        lo -= CHILD_LAG_S
    return lo <= f.t <= window[1]


def _claim_forgotten(e: dict[str, Any], nxt: dict[str, Any]) -> bool:
    """The later run was claimed with a delivery number no higher than the earlier one's: the
    database forgot the earlier claim (``deliveries`` is counted by every claim, never given
    back), which only a server crash can do to a commit it acknowledged."""
    first, then = e.get("deliveries"), nxt.get("deliveries")
    return isinstance(first, int) and isinstance(then, int) and then <= first


def _recovery(
    events: list[Event], finished: list[float], finished_at: dict[str, float]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [e for e in events if e.fault.kind == kind]
        times: list[float] = []
        for e in mine:
            if not e.t:
                continue
            if kind in PROCESS_FAULTS:
                after = [finished_at[j] for j in (e.held or []) if finished_at.get(j, 0) > e.t]
                if after:
                    times.append(min(after) - e.t)
            else:
                i = bisect.bisect_right(finished, e.t)
                if i < len(finished):
                    times.append(finished[i] - e.t)
        away = [e.away_s for e in mine if e.away_s is not None]
        out[kind] = {
            "count": len(mine),
            "errors": [e.error for e in mine if e.error],
            "measured": len(times),
            "median_s": statistics.median(times) if times else None,
            "max_s": max(times) if times else None,
            "away_s": away,
            "held": [len(e.held) if e.held is not None else None for e in mine],
            "terminated": [e.terminated for e in mine] if kind == "terminate" else [],
            "filled": [
                f"{len(e.held or [])}/{e.extra.get('capacity')}"
                for e in mine
                if kind == "sigkill-full"
            ],
        }
    return out


def _other(inputs: Inputs) -> dict[str, Any]:
    windows = [
        (e.t, e.t + (e.away_s or 0.0) + FAULT_WINDOW_S)
        for e in inputs.events
        if e.fault.kind in DB_FAULTS and e.t
    ]
    errors: dict[str, Counter[str]] = defaultdict(Counter)
    for workload, t, cls in inputs.ledger.errors:
        inside = any(a <= t <= b for a, b in windows)
        errors[workload][f"{cls} ({'in a fault window' if inside else 'database up'})"] += 1
    exits = {}
    for slot in inputs.slots:
        exits[slot.name] = {
            "starts": slot.starts,
            "planned_kills": sum(1 for x in slot.exits if x.planned),
            "unplanned_exits": [x.code for x in slot.exits if not x.planned and not x.retired],
            "orphans": sum(x.orphans for x in slot.exits if x.planned),
        }
    specials = Counter(
        f"{x.workload} {mix.NAMES[x.plan]}"
        for x in inputs.ledger.sent
        if x.plan in mix.NAMES and x.plan != mix.POISON
    )
    return {
        "specials": dict(sorted(specials.items())),
        "send_errors": {w: dict(c) for w, c in errors.items()},
        "gets": dict(inputs.ledger.gets),
        "exits": exits,
    }


def _starts(
    records: list[dict[str, Any]],
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Each job's executions (``start`` records) and how each execution ended (by exec id)."""
    starts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ends: dict[str, str] = {}
    for rec in records:
        if rec.get("k") == "start":
            starts[rec["job"]].append(rec)
        elif rec.get("k") == "end":
            ends[rec["exec"]] = rec["how"]
    return starts, ends


def _ran_in(e: dict[str, Any], a: Attempt) -> bool:
    """Execution ``e`` ran in attempt ``a``: by its worker (or a pool child of it), between the
    claim and the attempt's end (an attempt row without a worker: the same attempt number)."""
    pid = a.pid
    if pid is not None and pid not in (e.get("pid"), e.get("ppid")):
        return False
    if pid is None and e.get("attempt") != a.attempt:
        return False
    lo = a.claimed_at if a.claimed_at is not None else float("-inf")
    return bool(lo - ATTEMPT_SLACK_S <= e["t"] <= a.finished_at + ATTEMPT_SLACK_S)


def _thawed_in(e: dict[str, Any], a: Attempt, stops: list[Event]) -> bool:
    """Execution ``e`` is attempt ``a``'s body, handed over before a SIGSTOP of its worker and
    started on the thaw, after the attempt had been rescued meanwhile: the same worker (or a
    pool child of it), the same attempt number, a freeze that began within the attempt and
    ended at most ``CHILD_LAG_S`` before the start (as the bound allows)."""
    pid = a.pid
    if pid is None or pid not in (e.get("pid"), e.get("ppid")) or e.get("attempt") != a.attempt:
        return False
    lo = a.claimed_at if a.claimed_at is not None else float("-inf")
    for f in stops:
        if f.pid != pid or not lo - ATTEMPT_SLACK_S <= f.t <= a.finished_at:
            continue
        thaw = f.t + (f.away_s if f.away_s is not None else f.fault.hold_s)
        if a.finished_at <= e["t"] <= thaw + CHILD_LAG_S:
            return True
    return False


def _lost_results(
    inputs: Inputs, attempts: list[Attempt], rows: dict[str, Row], samples: dict[str, list[str]]
) -> None:
    starts, ends = _starts(inputs.records)
    by_job: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        by_job[a.job].append(a)
    kills = [e for e in inputs.events if e.fault.kind in PROCESS_FAULTS and e.pid]
    crashes = [e for e in inputs.events if e.fault.kind in CRASHES and e.t]
    for job, runs in starts.items():
        row = rows.get(runs[0]["w"])
        if row is None:
            continue
        for e in runs:
            if ends.get(e["exec"]) != "ok":
                continue
            mine = [a for a in by_job.get(job, []) if _ran_in(e, a)]
            if any(a.outcome == "done" for a in mine):
                continue
            until = max((a.finished_at for a in mine), default=float("inf"))
            if any(_cut_short(e, f, (e["t"], until)) for f in kills):
                continue  # its process was killed or frozen before the result was written
            if not mine and any(
                e["t"] - PREFETCH_WAIT_S <= f.t <= e["t"] + CLAIM_LAG_S for f in crashes
            ):
                continue  # a claim the crash forgot: its outcome had no row to land on
            row.lost_results += 1
            samples.setdefault(f"{row.workload} lost results", []).append(
                f"job {job}: returned by pid {e['pid']} (started {e['t']:.2f}, attempt "
                f"{e.get('attempt')}); its attempt: "
                + (", ".join(f"{a.outcome} {a.error or ''}".strip() for a in mine) or "no row")
                + "; faults after its start: "
                + ", ".join(f"{f.fault.kind}@{f.t:.2f}" for f in inputs.events if f.t >= e["t"])[
                    :200
                ]
            )


def _unstarted_charged(
    inputs: Inputs,
    attempts: list[Attempt],
    names: dict[str, str],
    rows: dict[str, Row],
    samples: dict[str, list[str]],
) -> None:
    starts, _ends = _starts(inputs.records)
    stops = [e for e in inputs.events if e.fault.kind == "sigstop" and e.pid and e.t]
    for a in attempts:
        workload = JOB_NAMES.get(names.get(a.job, ""))
        if workload is None or a.outcome not in CHARGED:
            continue
        if any(_ran_in(e, a) or _thawed_in(e, a, stops) for e in starts.get(a.job, [])):
            continue
        rows[workload].unstarted_charged += 1
        samples.setdefault(f"{workload} unstarted charged", []).append(
            f"job {a.job}: attempt {a.attempt} {a.outcome} ({(a.error or '')[:120]}) held by "
            f"{a.worker} from {a.claimed_at} to {a.finished_at:.2f}; no body started in it"
        )


def _running_at_end(inputs: Inputs, rows: dict[str, Row], samples: dict[str, list[str]]) -> None:
    for job, name, holder in inputs.running:
        workload = JOB_NAMES.get(name, "plain")
        rows[workload].running_at_end += 1
        samples.setdefault("running at end", []).append(f"{job} ({name}) held by {holder}")


def _slots(
    inputs: Inputs, rows: dict[str, Row], samples: dict[str, list[str]]
) -> dict[str, dict[str, int]]:
    """Per worker: its concurrency and the most probes it ran at once (its live slots)."""
    seen: dict[str, int] = {}
    for rec in inputs.records:
        if rec.get("k") == "probe":
            seen[rec["worker"]] = max(seen.get(rec["worker"], 0), int(rec["seen"]))
    out = {}
    for worker, c in inputs.concurrency.items():
        live = seen.get(worker, 0)
        out[worker] = {"concurrency": c, "live": live}
        lost = max(0, c - live)
        if not lost:
            continue
        samples.setdefault("slots lost", []).append(f"{worker}: {live} of {c} slots ran at once")
        for workload in APP_WORKLOADS.get(inputs.apps.get(worker, ""), ()):
            rows[workload].slots_lost += lost
    return out
