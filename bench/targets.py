"""Every project target, computed from this run's medians, with a verdict.

Why it exists: a target checked in another run (other load, other build) proves nothing. Each
target here is computed from this run's medians, with the range of the per-round ratios beside
it (rounds are interleaved, so round r of two systems ran close in time), and a verdict: PASS,
MISS, or none for a figure not measured or only informational. The many-workers and dashboard
cells add their own targets (``scale_report.py``, ``dashboard_bench.py``), built on ``Target``.

What it is not: the table that prints them (``report.py``), nor a gate: a missed target does not
change the exit code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.markup import escape

from . import cells
from .figure_text import fmt
from .producers import PRODUCERS
from .results import Results, Row
from .settings import TITLES

CELERY = ("celery-redis", "celery-rabbitmq")


@dataclass
class Target:
    name: str
    measured: str
    spread: str
    goal: str
    verdict: str | None  # "PASS", "MISS" or None (not measured / informational)
    value: float | None = None


def _per_round(
    num: Row, dens: Sequence[Row], combine: Callable[[list[float]], float]
) -> list[float]:
    out = []
    for rnd, value in num.values.items():
        got = [d.values[rnd] for d in dens if rnd in d.values]
        if got and combine(got):
            out.append(value / combine(got))
    return out


def _ratio_target(
    name: str,
    num: Row | None,
    dens: Sequence[Row],
    minimum: float | None,
    *,
    maximum: float | None = None,
) -> Target:
    if num is None or not dens:
        return Target(name, "not measured", "", _goal(minimum, maximum), None)
    best = (
        max(dens, key=lambda r: r.median)
        if minimum is not None
        else min(dens, key=lambda r: r.median)
    )
    value = num.median / best.median if best.median else float("nan")
    combine = max if minimum is not None else min
    rounds = _per_round(num, dens, combine)
    spread = f"{min(rounds):.2f} - {max(rounds):.2f}" if rounds else ""
    measured = (
        f"x{value:.2f}  [dim]({fmt(num.median, num.unit)} ÷ {fmt(best.median, best.unit)} "
        f"{best.unit}, {TITLES[best.system]} {escape(best.label)})[/dim]"
    )
    return Target(
        name, measured, spread, _goal(minimum, maximum), _verdict(value, minimum, maximum), value
    )


def info_ratio(name: str, row: Row | None, den: Row | None) -> Target:
    """An informational target: ``row``'s median rate ÷ ``den``'s, with the per-round range."""
    if row is None or den is None or not den.median:
        return Target(name, "not measured", "", "informational", None)
    value = row.median / den.median
    rounds = _per_round(row, [den], max)
    spread = f"{min(rounds):.2f} - {max(rounds):.2f}" if rounds else ""
    measured = (
        f"x{value:.2f}  [dim]({fmt(row.median, 'jobs/s')} ÷ {fmt(den.median, 'jobs/s')} "
        "jobs/s)[/dim]"
    )
    return Target(name, measured, spread, "informational", None, value)


def _fleet_targets(r: Results) -> list[Target]:
    """Idle fleets of 8 and 32: p50 at most twice the one-worker fleet's, at most 2 claims a
    job (one insert wakes one worker)."""
    rows = r.find("ujobs", cells.FLEET_LATENCY, "p50")
    alone = next((x for x in rows if x.label.startswith("1 idle worker ")), None)
    out: list[Target] = []
    for size in (8, 32):
        p50 = next((x for x in rows if x.label.startswith(f"{size} idle workers")), None)
        out.append(
            _ratio_target(
                f"ujobs p50, {size} idle workers ÷ 1 idle worker",
                p50,
                [alone] if alone else [],
                None,
                maximum=2.0,
            )
        )
        per_job = next(
            (
                x
                for x in r.find("ujobs", cells.FLEET_LATENCY, "ratio")
                if x.label.startswith(f"{size} idle workers") and x.label.endswith("· claims a job")
            ),
            None,
        )
        if per_job is None:
            out.append(Target(f"ujobs claims a job, {size} idle workers", "not measured", "",
                              "≤ 2", None))  # fmt: skip
        else:
            out.append(
                Target(
                    f"ujobs claims a job, {size} idle workers",
                    f"{per_job.median:.2f}",
                    f"{per_job.low:.2f} - {per_job.high:.2f}",
                    "≤ 2",
                    _verdict(per_job.median, None, 2.0),
                    per_job.median,
                )
            )
    return out


def _goal(minimum: float | None, maximum: float | None) -> str:
    return f"≥ {minimum:g}" if minimum is not None else f"≤ {maximum:g}"


def _verdict(value: float, minimum: float | None, maximum: float | None) -> str | None:
    if math.isnan(value):
        return None
    if minimum is not None:
        return "PASS" if value >= minimum else "MISS"
    assert maximum is not None
    return "PASS" if value <= maximum else "MISS"


def targets(results: Results) -> list[Target]:
    r = results
    ujobs = "ujobs"
    celery_drains = [
        row
        for system in CELERY
        for cell in (cells.DRAIN_1, cells.DRAIN_CORE)
        for row in r.find(system, cell, "rate")
    ]
    out = [
        _ratio_target(
            "ujobs drain, 1 process ÷ best Celery drain",
            r.first(ujobs, cells.DRAIN_1, "rate"),
            celery_drains,
            3,
        ),
        _ratio_target(
            "ujobs drain, 1 process per core ÷ best Celery drain",
            r.first(ujobs, cells.DRAIN_CORE, "rate"),
            celery_drains,
            5,
        ),
    ]
    for kind, limit in (("p50", 2.5), ("p99", 6.0)):
        row = r.first(ujobs, cells.LATENCY, kind)
        if row is None:
            out.append(
                Target(f"ujobs idle pick-up {kind}", "not measured", "", f"≤ {limit} ms", None)
            )
        else:
            out.append(
                Target(
                    f"ujobs idle pick-up {kind}",
                    f"{row.median:.2f} ms",
                    f"{row.low:.2f} - {row.high:.2f}",
                    f"≤ {limit} ms",
                    _verdict(row.median, None, limit),
                    row.median,
                )
            )
        for system in CELERY:
            other = r.find(system, cells.LATENCY, kind)
            if other:
                out.append(
                    _ratio_target(
                        f"ujobs {kind} ÷ {TITLES[system]} {kind}", row, other, None, maximum=1.0
                    )
                )
    out.extend(_fleet_targets(r))
    out.append(
        _ratio_target(
            "ujobs enqueue_many ÷ raw multi-row INSERT",
            r.first(ujobs, cells.ENQ_BATCH, "rate"),
            [x for x in r.find("raw", cells.ENQ_BATCH, "rate") if "INSERT" in x.label],
            0.5,
        )
    )
    out.append(
        _ratio_target(
            "ujobs one-by-one ÷ raw one commit per row (faster way)",
            r.first(ujobs, cells.ENQ_ONE, "rate"),
            r.find("raw", cells.ENQ_ONE, "rate"),
            0.8,
        )
    )
    out.extend(_producer_targets(results))
    for cell in (cells.RSS_1, cells.RSS_CORE):
        out.append(_rss_target(results, cell))
    from .step_targets import step_targets  # it builds on this module's Target

    out.extend(step_targets(results))
    out.extend(celery_shaped_targets(results))
    out.extend(migrate_targets(results))
    out.extend(lean_targets(results))
    from . import dashboard_bench, scale_report  # they build on this module's Target

    out.extend(scale_report.targets(results))
    out.extend(dashboard_bench.targets(results))
    return out


LEAN_GOALS = (
    # (label in the cell, target name, minimum, maximum)
    ("last tenth ÷ first tenth", "throughput of the last tenth ÷ the first", 0.85, None),
    ("HOT share of updates on x_jobs", "HOT share of updates on x_jobs (%)", 50.0, None),
    (
        "x_job_claimable_claim_idx after VACUUM",
        "claim index after a routine VACUUM (MiB)",
        None,
        1.0,
    ),
)


def lean_targets(results: Results) -> list[Target]:
    """The lean-table cell: flat throughput, HOT updates, a small claim index."""
    out: list[Target] = []
    jobs = results.settings.get("lean_jobs", 0)
    for label, name, minimum, maximum in LEAN_GOALS:
        row = results.rows.get(("ujobs", cells.LEAN, label))
        full = f"ujobs lean table, {jobs:,} jobs: {name}"
        if row is None or math.isnan(row.median):
            out.append(Target(full, "not measured", "", _goal(minimum, maximum), None))
            continue
        out.append(
            Target(
                full,
                fmt(row.median, row.unit),
                "",
                _goal(minimum, maximum),
                _verdict(row.median, minimum, maximum),
                row.median,
            )
        )
    return out


MIGRATE_GOALS = (("Redis", 10_000.0), ("RabbitMQ", 5_000.0))  # messages/s into Postgres
MIGRATE_GOAL_JOBS = 20_000  # the goals are for a backlog this size (start-up is amortised over it)
MIGRATE_VS_CELERY = 10.0  # migrate vs Celery working off the same backlog on that broker


def migrate_targets(results: Results) -> list[Target]:
    """``ujobs-bridge migrate``: drain rate per broker (spawn -> exit, and on the drainer's own
    clock, which leaves out CLI start-up), that rate (spawn -> exit) against the faster of
    Celery's own drains of N no-op tasks on the same broker in the same run (``--only
    migrate,celery-redis,celery-rabbitmq --cells drain-broker,drain-core``), and the drainer's
    RSS across the run."""
    out: list[Target] = []
    jobs = results.settings.get("jobs", 0)
    for broker, goal in MIGRATE_GOALS:
        prefix = f"{broker} -> Postgres · "
        for suffix in ("spawn→exit", "drainer's clock"):
            row = results.rows.get(("migrate", cells.MIGRATE, prefix + suffix))
            name = f"migrate {broker} -> Postgres, {jobs:,} Celery messages ({suffix})"
            if row is None or math.isnan(row.median):
                out.append(Target(name, "not measured", "", f"≥ {goal:,.0f}/s", None))
                continue
            judged = jobs >= MIGRATE_GOAL_JOBS  # a smaller backlog is mostly start-up
            out.append(
                Target(
                    name,
                    f"{row.median:,.0f} msgs/s",
                    f"{fmt(row.low, 'jobs/s')} - {fmt(row.high, 'jobs/s')}",
                    f"≥ {goal:,.0f}/s" + ("" if judged else f" at N ≥ {MIGRATE_GOAL_JOBS:,}"),
                    _verdict(row.median, goal, None) if judged else None,
                    row.median,
                )
            )
        celery = f"celery-{broker.lower()}"
        drains = [
            row
            for cell in (cells.DRAIN_1, cells.DRAIN_CORE, cells.DRAIN_SHARED)
            for row in results.find(celery, cell, "rate")
        ]
        out.append(
            _ratio_target(
                f"migrate {broker} -> Postgres (spawn→exit) ÷ faster {TITLES[celery]} drain of "
                "as many tasks",
                results.rows.get(("migrate", cells.MIGRATE, prefix + "spawn→exit")),
                drains,
                MIGRATE_VS_CELERY,
            )
        )
        out.append(_cpu_bound_target(results, broker, drains, prefix))
        out.append(_flat_target(results, "migrate", cells.RSS_MIGRATE, f"{broker} -> Postgres · "))
    return out


def _cpu_bound_target(results: Results, broker: str, drains: Sequence[Row], prefix: str) -> Target:
    """How far the machine lets the migrate ratio go (informational): the faster Celery drain's
    machine CPU per task ÷ migrate's per message, both spawn to end (``machine_cpu``). With
    every core busy in both drains the rate ratio is this; a ratio target above it needs the
    drain to spend less CPU, not to run faster."""
    name = f"migrate {broker}: Celery's machine CPU per task ÷ migrate's per message"
    cost = results.rows.get(("migrate", cells.MIGRATE, f"{prefix}{cells.CPU_LABEL} a message"))
    best = max(drains, key=lambda r: r.median) if drains else None
    celery = (
        None
        if best is None
        else results.rows.get((best.system, best.cell, f"{best.label} · {cells.CPU_LABEL} a job"))
    )
    if cost is None or celery is None or not cost.median or math.isnan(cost.median + celery.median):
        return Target(name, "not measured", "", "informational", None)  # no /proc: NaN
    value = celery.median / cost.median
    rounds = _per_round(celery, [cost], max)
    spread = f"{min(rounds):.2f} - {max(rounds):.2f}" if rounds else ""
    measured = (
        f"x{value:.2f}  [dim]({celery.median:,.0f} ÷ {cost.median:,.0f} µs; the most the rate "
        f"ratio can be with every core busy)[/dim]"
    )
    return Target(name, measured, spread, "informational", None, value)


DELAY_OFF = '.delay(), ujobs_send_commit="off" (returns before the WAL flush)'


def celery_shaped_targets(results: Results) -> list[Target]:
    """celery_compat vs real Celery, the same calls in the same run."""
    r = results
    compat = "celery-compat"
    return [
        _ratio_target(
            "celery_compat .delay() one by one (each a commit) ÷ Celery+Redis .delay()",
            r.first(compat, cells.DELAY_ONE, "rate"),
            r.find("celery-redis", cells.DELAY_ONE, "rate"),
            0.8,
        ),
        _ratio_target(
            'celery_compat .delay() one by one, ujobs_send_commit="off" ÷ Celery+Redis .delay()',
            r.rows.get((compat, cells.DELAY_ONE, DELAY_OFF)),
            r.find("celery-redis", cells.DELAY_ONE, "rate"),
            1.2,
        ),
        *_delay_ceiling_targets(results),
        *_concurrent_targets(results),
        _ratio_target(
            f"celery_compat {cells.TX_SIZE:,} .delay() in one transaction ÷ Celery+Redis "
            f"{cells.TX_SIZE:,} .delay()",
            r.first(compat, cells.DELAY_TX, "rate"),
            r.find("celery-redis", cells.DELAY_TX, "rate"),
            2,
        ),
        _ratio_target(
            f"celery_compat drain, 1 worker process ÷ faster Celery prefork -c "
            f"{cells.CELERY_PREFORK} (Redis, RabbitMQ)",
            r.first(compat, cells.DRAIN_SHARED, "rate"),
            [row for system in CELERY for row in r.find(system, cells.DRAIN_SHARED, "rate")],
            2,
        ),
    ]


def _delay_ceiling_targets(results: Results) -> list[Target]:
    """The raw ceiling of a Celery send into Postgres (informational): Celery's own ``.delay()``
    with its message one INSERT (``bench.raw_send``), ÷ Celery+Redis's ``.delay()`` (the most a
    send that keeps Celery's messages and waits for its commit can be), and celery_compat's
    ``.delay()`` ÷ that ceiling, each send commit against its own."""
    celery = results.first("celery-redis", cells.DELAY_ONE, "rate")
    pairs = (
        (
            "raw ceiling: Celery .delay(), its message one INSERT ÷ Celery+Redis .delay()",
            results.rows.get(("raw", cells.DELAY_ONE, cells.DELAY_CEILING)),
            celery,
        ),
        (
            "raw ceiling, synchronous_commit=off ÷ Celery+Redis .delay()",
            results.rows.get(("raw", cells.DELAY_ONE, cells.DELAY_CEILING_OFF)),
            celery,
        ),
        (
            "celery_compat .delay() one by one ÷ the raw ceiling",
            results.first("celery-compat", cells.DELAY_ONE, "rate"),
            results.rows.get(("raw", cells.DELAY_ONE, cells.DELAY_CEILING)),
        ),
        (
            'celery_compat .delay(), ujobs_send_commit="off" ÷ the raw ceiling, '
            "synchronous_commit=off",
            results.rows.get(("celery-compat", cells.DELAY_ONE, DELAY_OFF)),
            results.rows.get(("raw", cells.DELAY_ONE, cells.DELAY_CEILING_OFF)),
        ),
    )
    return [info_ratio(name, row, den) for name, row, den in pairs]


def _concurrent_targets(results: Results) -> list[Target]:
    """The concurrent-senders cell (informational): celery_compat's ``.delay()`` rate from
    threads of one process and from several processes, with each send commit, ÷ Celery+Redis's
    from as many."""
    out = []
    for label in (f"{cells.SENDER_THREADS} threads of one process", f"{PRODUCERS} processes"):
        for suffix in ("", ', ujobs_send_commit="off"'):
            out.append(
                info_ratio(
                    f"celery_compat .delay() from {label}{suffix} ÷ Celery+Redis from as many",
                    results.rows.get(("celery-compat", cells.DELAY_MANY, label + suffix)),
                    results.rows.get(("celery-redis", cells.DELAY_MANY, label)),
                )
            )
    return out


def _producer_targets(results: Results) -> list[Target]:
    """The many-producers cell (informational): the bridge's rate from 8 producer processes,
    with no worker waiting and with one waiting (its inserts notify, 0021), ÷ the raw INSERT's
    from as many."""
    raw = [x for x in results.find("raw", cells.ENQ_PRODUCERS, "rate") if "notify" not in x.label]
    return [
        info_ratio(
            f"ujobs 8 producers, {label} ÷ raw INSERT from 8",
            results.rows.get(("ujobs", cells.ENQ_PRODUCERS, label)),
            raw[0] if raw else None,
        )
        for label in ("no worker waiting", "a worker waiting (each insert notifies)")
    ]


FLAT_GROWTH = 0.10  # end within 10 % of start counts as flat


def _rss_target(results: Results, cell: str) -> Target:
    return _flat_target(results, "ujobs", cell, "")


def _flat_target(results: Results, system: str, cell: str, prefix: str) -> Target:
    start, peak, end = (
        next((r for r in results.find(system, cell, k) if r.label.startswith(prefix)), None)
        for k in ("rss_start", "rss_peak", "rss_end")
    )
    where = f" ({prefix.removesuffix(' · ')})" if prefix else ""
    name = f"{cell if system == 'migrate' else f'{system} {cell}'}{where}: start → peak → end"
    if start is None or peak is None or end is None:
        return Target(name, "not measured", "", "flat", None)
    growth = end.median / start.median - 1 if start.median else float("nan")
    measured = f"{start.median:.1f} → {peak.median:.1f} → {end.median:.1f} MiB  [dim](end {growth:+.1%})[/dim]"
    spread = f"peak {peak.low:.1f} - {peak.high:.1f}"
    verdict = _verdict(growth, None, FLAT_GROWTH)
    return Target(name, measured, spread, f"end ≤ start {FLAT_GROWTH:+.0%}", verdict, growth)
