"""``python -m bench.pages docs/bench/*.json``: the benchmark results page and charts, from runs.

Why it exists: figures belong to data, not prose. A run written with ``python -m bench
--json-out docs/bench/DATE.json`` is committed as it is; this draws, from those files alone, the
docs' results page (``results.md`` beside them: per run its date, commit, settings, the machine's
facts, each target with its ratio and verdict, and every figure) and one SVG chart per run (each
target's measured value against its goal). ``tests/unit/test_bench_pages.py`` regenerates both
and fails when the committed ones differ, so the page cannot drift from its data.

What it is not: a measurement (``python -m bench`` is) nor a judge across runs: every ratio and
verdict is the one its run computed, on its own machine.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

PAGE_NAME = "results.md"
GOAL = re.compile(r"^\s*([≥≤])\s*([\d,]*\.?\d+)")
VERDICT_COLOUR = {"PASS": "#2ca02c", "MISS": "#d62728"}
# The chart: one row per target, its value over its goal on a log2 axis from 1/8 to 8.
ROW_H, LABEL_W, BAR_W, RIGHT_W, TOP = 24, 430, 320, 170, 40
SPAN = 3.0  # log2 of the axis' ends


@dataclass(frozen=True)
class Judged:
    """One target of a run with a numeric goal: how far its value is past (>1) or short of it."""

    name: str
    value: float
    goal: str
    verdict: str
    margin: float  # value / goal for "≥", goal / value for "≤": at least 1 when met


def judged(targets: Sequence[dict[str, Any]]) -> list[Judged]:
    """The run's targets that have a value, a verdict and a goal of the form ``≥ N`` / ``≤ N``."""
    out = []
    for t in targets:
        found = GOAL.match(t.get("goal") or "")
        value = t.get("value")
        if not found or value is None or not t.get("verdict"):
            continue
        goal = float(found.group(2).replace(",", ""))
        if goal <= 0 or value <= 0:
            continue
        margin = value / goal if found.group(1) == "≥" else goal / value
        out.append(Judged(t["name"], float(value), t["goal"], t["verdict"], margin))
    return out


def chart(run: dict[str, Any]) -> str:
    """The SVG of one run: a bar per target from the goal line to its margin (log scale)."""
    rows = judged(run.get("targets", []))
    width = LABEL_W + BAR_W + RIGHT_W
    height = TOP + ROW_H * max(len(rows), 1) + 30
    x_goal = LABEL_W + BAR_W / 2

    def x_of(margin: float) -> float:
        clipped = max(-SPAN, min(SPAN, math.log2(margin)))
        return x_goal + clipped / SPAN * (BAR_W / 2)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-weight="bold">'
        f"{escape(_title(run))}: each target, measured ÷ goal (log scale; right of the line "
        "meets it)</text>",
    ]
    for i, label in enumerate(("1/8", "1/4", "1/2", "goal", "2", "4", "8")):
        x = x_of(2.0 ** (i - SPAN))
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 6}" y2="{height - 24}" '
            f'stroke="{"#333" if label == "goal" else "#ddd"}"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{height - 10}" text-anchor="middle" fill="#555">{label}</text>'
        )
    for i, row in enumerate(rows):
        y = TOP + i * ROW_H
        x_end = x_of(row.margin)
        colour = VERDICT_COLOUR.get(row.verdict, "#777")
        parts.append(
            f'<text x="{LABEL_W - 8}" y="{y + 15}" text-anchor="end">{escape(_short(row.name))}'
            "</text>"
        )
        parts.append(
            f'<rect x="{min(x_goal, x_end):.1f}" y="{y + 4}" width="{abs(x_end - x_goal):.1f}" '
            f'height="{ROW_H - 8}" fill="{colour}"/>'
        )
        parts.append(
            f'<text x="{LABEL_W + BAR_W + 8}" y="{y + 15}">{escape(_figure(row.value))} '
            f"(goal {escape(row.goal)}) {escape(row.verdict)}</text>"
        )
    if not rows:
        parts.append(f'<text x="{x_goal}" y="{TOP + 15}" text-anchor="middle">no target</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _title(run: dict[str, Any]) -> str:
    return f"run of {run.get('date', '?')}"


def _short(name: str, limit: int = 64) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _figure(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def _cell(text: Any) -> str:
    """Text safe inside a Markdown table cell: HTML escaped, pipes and newlines neutralised."""
    return escape(str(text)).replace("|", "\\|").replace("\n", " ")


def _machine_rows(machine: dict[str, Any]) -> list[str]:
    labels = {
        "cores": "cores",
        "python": "Python",
        "python_implementation": "implementation",
        "python_loop_iterations_per_s": "Python speed (loop iterations/s)",
        "fdatasync_4k_ms": "fdatasync of a 4 KiB write (ms, median)",
        "load_average_1m_start": "load average, start",
        "load_average_1m_end": "load average, end",
        "loaded_by_others": "loaded by other work (load ≥ half the cores)",
    }
    out = []
    for key, label in labels.items():
        if key not in machine:
            continue
        value = machine[key]
        if isinstance(value, float):
            value = f"{value:.2f}" if key.startswith("load") else f"{value:g}"
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:,}"
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        out.append(f"| {_cell(label)} | {_cell(value)} |")
    return out


def run_section(run: dict[str, Any], json_name: str, svg_name: str) -> list[str]:
    settings = run.get("settings", {})
    machine = run.get("machine", {})
    commit = str(machine.get("commit") or "unknown")
    measured = [t for t in run.get("targets", []) if t.get("verdict") or t.get("value") is not None]
    passed = sum(1 for t in measured if t.get("verdict") == "PASS")
    missed = sum(1 for t in measured if t.get("verdict") == "MISS")
    lines = [
        f"## Run of {run.get('date', '?')}",
        "",
        f"Commit `{_cell(commit[:12] + commit[40:])}`; N = {settings.get('jobs', 0):,} jobs, "
        f"{settings.get('rounds', '?')} round(s); systems: "
        f"{_cell(', '.join(settings.get('systems', [])))}; data: [{json_name}]({json_name}). "
        f"Targets measured: {len(measured)} ({passed} met, {missed} missed); "
        f"errors: {len(run.get('errors', []))}.",
        "",
        "| machine | |",
        "|---|---|",
        *_machine_rows(machine),
        "",
        f"![{_cell(_title(run))}: each target against its goal]({svg_name})",
        "",
        "| target | measured | ratio or value | goal | verdict |",
        "|---|---|---:|---|---|",
    ]
    for t in measured:
        value = t.get("value")
        lines.append(
            f"| {_cell(t['name'])} | {_cell(t.get('measured', ''))} | "
            f"{'' if value is None else _cell(_figure(value))} | {_cell(t.get('goal', ''))} | "
            f"{_cell(t.get('verdict') or 'informational')} |"
        )
    lines += [
        "",
        "| cell | system | figure | median | min | max |",
        "|---|---|---|---:|---:|---:|",
    ]
    for f in run.get("figures", []):
        unit = f.get("unit", "")
        lines.append(
            f"| {_cell(f['cell'])} | {_cell(f['system'])} | {_cell(f['label'])} ({_cell(unit)}) | "
            + " | ".join(_cell(_number(f.get(k))) for k in ("median", "min", "max"))
            + " |"
        )
    return [*lines, ""]


def _number(value: float | None) -> str:
    return "-" if value is None else _figure(value)


def render(paths: Sequence[Path]) -> dict[Path, str]:
    """Every file this generates from the runs at ``paths``: the page and one chart per run."""
    runs = sorted(
        ((p, json.loads(p.read_text(encoding="utf-8"))) for p in paths),
        key=lambda item: (item[1].get("date", ""), item[0].name),
        reverse=True,
    )
    if not runs:
        raise ValueError("no run given: pass the JSON files of python -m bench --json-out")
    directory = runs[0][0].parent
    out: dict[Path, str] = {}
    lines = [
        "# Benchmark results",
        "",
        "<!-- generated by `python -m bench.pages docs/bench/*.json`: edit the generator, not "
        "this page -->",
        "",
        "Each run below was written by `python -m bench --json-out` and is committed as it is; "
        "this page and its charts are drawn from those files. Every ratio compares systems "
        "measured in the same run on the same machine; the machine's facts say what that "
        "machine was. Compare ratios within a run, never figures across runs. "
        "[Run the benchmarks](../how-to/benchmarks.md) says how to measure your own.",
        "",
    ]
    for path, run in runs:
        if path.parent != directory:
            raise ValueError(f"{path}: every run must sit in {directory}")
        svg = path.with_suffix(".svg")
        out[svg] = chart(run)
        lines += run_section(run, path.name, svg.name)
    out[directory / PAGE_NAME] = "\n".join(lines).rstrip("\n") + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pages", description=__doc__.split("\n")[0]
    )
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files of python -m bench")
    args = parser.parse_args(argv)
    for path, text in render(args.runs).items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
