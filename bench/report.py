"""The run's tables: one per cell, then the targets, all computed from the same ``Results``.

Why it exists: a figure without its spread invites over-reading. Each cell table shows the
median across rounds, the min-max across rounds, and the ratio of medians to Celery+Redis's
figure of the same kind in the same cell. The step-overhead cell is ujobs-bridge's alone: its
ratio column compares the 5-step drain with the plain drain of the same round, and the other
systems show "n/a". Then the targets table (``targets.py`` computes them), then any errors.

What it is not: the targets' arithmetic (``targets.py``), nor a judge of the benchmark's
fairness; the module docstrings of each system say what is and is not being compared.
"""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import cells, scale_report
from .figure_text import fmt
from .results import HIGHER_IS_BETTER, Results, Row
from .settings import BASELINE, SYSTEMS, TITLES
from .targets import Target, _per_round, targets


def _order(row: Row) -> int:
    return SYSTEMS.index(row.system) if row.system in SYSTEMS else len(SYSTEMS)


def cell_table(results: Results, cell: str) -> Table | None:
    rows = sorted((r for r in results.rows.values() if r.cell == cell), key=_order)
    if not rows:
        return None
    table = Table(title=cell, title_justify="left", show_lines=False)
    table.add_column("system")
    table.add_column("figure")
    table.add_column("median", justify="right")
    table.add_column("min-max", justify="right")
    table.add_column(f"ratio vs {TITLES[BASELINE]}", justify="right")
    for row in rows:
        ref = results.first(BASELINE, cell, row.kind)
        ratio = row.median / ref.median if ref and ref.median else float("nan")
        better = row.kind in HIGHER_IS_BETTER
        ratio_text = "-" if math.isnan(ratio) else f"x{ratio:.2f}"
        if row.system != BASELINE and not math.isnan(ratio):
            good = ratio > 1 if better else ratio < 1
            ratio_text = f"[{'green' if good else 'red'}]{ratio_text}[/]"
        table.add_row(
            TITLES.get(row.system, row.system),
            f"{escape(row.label)} [dim]({row.unit})[/dim]",
            fmt(row.median, row.unit),
            f"{fmt(row.low, row.unit)} - {fmt(row.high, row.unit)}",
            ratio_text,
        )
    return table


def steps_table(results: Results) -> Table | None:
    """The step-overhead cell: ujobs-bridge's two drains, the ratio to the plain one; the raw
    ceiling's jobs against ujobs-bridge's plain job; n/a else."""
    rows = [r for r in results.rows.values() if r.cell == cells.STEPS]
    if not rows:
        return None
    table = Table(title=cells.STEPS, title_justify="left", show_lines=False)
    for column in ("system", "figure", "median", "min-max"):
        table.add_column(column, justify="right" if column in ("median", "min-max") else "left")
    table.add_column("ratio vs plain job (per-round range)", justify="right")
    for row in sorted(rows, key=_order):
        suffix = row.label.removeprefix(cells.STEPS_LABEL).removeprefix(cells.PLAIN_LABEL)
        plain = results.rows.get((row.system, row.cell, cells.PLAIN_LABEL + suffix))
        if row.label == cells.STEP_CEILING:  # the raw ceiling, against the target's plain job
            plain = results.rows.get(("ujobs", row.cell, cells.PLAIN_LABEL + cells.STEADY))
        ratio = row.median / plain.median if plain and plain.median else float("nan")
        rounds = _per_round(row, [plain] if plain else [], max)
        spread = f" ({min(rounds):.2f} - {max(rounds):.2f})" if rounds else ""
        table.add_row(
            TITLES.get(row.system, row.system),
            f"{escape(row.label)} [dim]({row.unit})[/dim]",
            fmt(row.median, row.unit),
            f"{fmt(row.low, row.unit)} - {fmt(row.high, row.unit)}",
            "-" if math.isnan(ratio) else f"x{ratio:.2f}{spread}",
        )
    measured = {row.system for row in rows}
    for system in results.settings.get("systems", ()):
        if system not in measured:
            na = "[dim]n/a[/dim]"
            table.add_row(TITLES.get(system, system), "[dim]no durable steps[/dim]", na, na, na)
    return table


def targets_table(items: list[Target]) -> Table:
    table = Table(title="targets (this run's medians)", title_justify="left")
    table.add_column("target")
    table.add_column("measured")
    table.add_column("per-round range", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("verdict")
    colours = {"PASS": "green", "MISS": "red"}
    for t in items:
        verdict = f"[{colours[t.verdict]}]{t.verdict}[/]" if t.verdict else "[dim]n/a[/dim]"
        table.add_row(t.name, t.measured, t.spread, t.goal, verdict)
    return table


def render(results: Results, console: Console) -> list[Target]:
    for cell in cells.CELLS:
        if cell == cells.SCALE:
            table = scale_report.table(results)
        elif cell == cells.STEPS:
            table = steps_table(results)
        else:
            table = cell_table(results, cell)
        if table is not None:
            console.print(table)
    found = targets(results)
    console.print(targets_table(found))
    if results.errors:
        errors = Table(title="errors", title_justify="left")
        for column in ("system", "cell", "round", "error"):
            errors.add_column(column)
        for e in results.errors:
            rnd = "" if e["round"] is None else str(e["round"] + 1)
            errors.add_row(e["system"], e["cell"], rnd, escape(e["error"][:300]))
        console.print(errors)
    return found
