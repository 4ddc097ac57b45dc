"""The step-overhead cell's targets: what durable steps cost a drain, against the plain job.

Why it exists: ``targets.py`` holds every cell's goals; the step pairs (one per worker ``-c``
of ``cells.STEP_BODIES``) carry three of them, the goal at the first ``-c``, what more bodies
sharing each commit reach, and what one lone step costs, and they read best together.

What it is not: the measurement (``ujobs_system.step_overhead``) or the report's step table.
"""

from __future__ import annotations

from . import cells
from .figure_text import fmt
from .results import Results, Row
from .targets import Target, _per_round, _verdict, info_ratio


def _fastest_plain(results: Results) -> Row | None:
    """The plain-job drain (1st→Nth) of the step cell at whichever ``-c`` was fastest."""
    labels = [cells.PLAIN_LABEL + cells.bodies_suffix(c) + cells.STEADY for c in cells.STEP_BODIES]
    rows = [row for label in labels if (row := results.rows.get(("ujobs", cells.STEPS, label)))]
    return max(rows, key=lambda r: r.median, default=None)


STEPS_GOAL = 0.25  # the target: a job of 5 no-op steps at least this share of the plain rate


def step_targets(results: Results) -> list[Target]:
    """What 5 no-op steps cost: the share of the plain rate at the first ``-c`` of
    ``STEP_BODIES`` (the goal), the steps at the largest ``-c`` against the fastest plain drain
    of any ``-c`` (informational: what more bodies sharing each commit reach), and what one lone
    step costs (the ``-c 1`` pair, informational). All compare the rates from the first completion to the N-th, so the worker's start-up (the
    same for both drains) does not hide what the steps cost."""
    out = []
    for concurrency in cells.STEP_BODIES:
        suffix = cells.bodies_suffix(concurrency) + cells.STEADY
        plain = results.rows.get(("ujobs", cells.STEPS, cells.PLAIN_LABEL + suffix))
        stepped = results.rows.get(("ujobs", cells.STEPS, cells.STEPS_LABEL + suffix))
        if concurrency == cells.STEP_BODIES[0]:
            name = f"ujobs drain, job of {cells.STEP_COUNT} no-op steps ÷ plain job (1st→Nth)"
            goal: str = f"≥ {STEPS_GOAL:g}"
        elif concurrency == 1:
            name = "ujobs one body (worker -c 1): drain time per step.run"
            goal = "informational"
        elif concurrency == max(cells.STEP_BODIES):
            name = (
                f"ujobs drain, job of {cells.STEP_COUNT} no-op steps at worker -c {concurrency} "
                "÷ the fastest plain-job drain (1st→Nth)"
            )
            goal = "informational"
            plain = _fastest_plain(results) or plain
        else:
            continue
        if plain is None or stepped is None or not plain.median or not stepped.median:
            out.append(Target(name, "not measured", "", goal, None))
            continue
        value = stepped.median / plain.median
        per_step_us = (1 / stepped.median - 1 / plain.median) / cells.STEP_COUNT * 1e6
        rounds = _per_round(stepped, [plain], max)
        spread = f"{min(rounds):.2f} - {max(rounds):.2f}" if rounds else ""
        if concurrency == 1:
            measured = (
                f"{per_step_us:,.0f} µs  [dim](x{value:.2f} of the plain rate: "
                f"{fmt(stepped.median, 'jobs/s')} ÷ {fmt(plain.median, 'jobs/s')} jobs/s)[/dim]"
            )
            out.append(Target(name, measured, spread, goal, None, per_step_us))
            continue
        measured = (
            f"x{value:.2f}  [dim]({fmt(stepped.median, 'jobs/s')} ÷ {fmt(plain.median, 'jobs/s')} "
            f"jobs/s; +{per_step_us:.0f} µs of drain time per step)[/dim]"
        )
        verdict = None if goal == "informational" else _verdict(value, STEPS_GOAL, None)
        out.append(Target(name, measured, spread, goal, verdict, value))
    out.insert(1, _ceiling_target(results))
    return out


def _ceiling_target(results: Results) -> Target:
    """The raw ceiling of the goal (informational): jobs of ``STEP_COUNT`` committed INSERTs from
    as many bodies, no claim (``raw_system.step_ceiling``), ÷ the goal's plain-job drain: a
    goal above it asks more of steps than Postgres gives such bodies on this machine."""
    name = (
        f"raw ceiling: job of {cells.STEP_COUNT} committed INSERTs from {cells.STEP_BODIES[0]} "
        "threads (no claim) ÷ ujobs plain job (1st→Nth)"
    )
    ceiling = results.rows.get(("raw", cells.STEPS, cells.STEP_CEILING))
    plain = results.rows.get(("ujobs", cells.STEPS, cells.PLAIN_LABEL + cells.STEADY))
    return info_ratio(name, ceiling, plain)
