"""The soak's output: the loss table, recovery per fault kind, and what else is worth a look.

Why it exists: the closing note quotes these tables, so they say what each column means in
its header and show ``-`` where a column does not apply (steps re-run outside the step
workload, fires outside the scheduler). Loss columns are marked ``!``; the run fails if any of
them is not zero. Samples of whatever was counted as a loss follow (job ids and why), so a
non-zero figure can be chased down from the output alone.

What it is not: the rules (``verdict`` has them, in its docstring).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .verdict import WORKLOADS, Verdict

SAMPLES = 8


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render(verdict: Verdict, console: Console, header: dict[str, Any]) -> None:
    table = Table(title="soak: per workload (! = loss column, must be 0)", title_justify="left")
    for name, justify in (
        ("workload", "left"),
        ("enqueued", "right"),
        ("done", "right"),
        ("planned dead", "right"),
        ("! lost", "right"),
        ("! beyond bound", "right"),
        ("! steps re-run", "right"),
        ("! infra dead", "right"),
        ("! double fires", "right"),
        ("! misses", "right"),
        ("! stuck leases", "right"),
        ("! lost results", "right"),
        ("! unstarted charged", "right"),
        ("! running at end", "right"),
        ("! slots lost", "right"),
        ("executions", "right"),
        ("re-runs by faults", "right"),
        ("of which claims lost in a crash", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=name == "workload")  # type: ignore[arg-type]
    for w in WORKLOADS:
        r = verdict.rows[w]
        table.add_row(
            w,
            _n(r.enqueued),
            _n(r.done),
            _n(r.dead_planned),
            _n(r.lost),
            _n(r.beyond_bound),
            _n(r.steps_rerun),
            _n(r.infra_dead),
            _n(r.double_fires),
            _n(r.misses),
            _n(r.stuck),
            _n(r.lost_results),
            _n(r.unstarted_charged),
            _n(r.running_at_end),
            _n(r.slots_lost),
            _n(r.executions),
            _n(r.explained_reruns),
            _n(r.forgotten_claims),
        )
    console.print(table)

    faults = Table(title="faults: recovery = fault -> first settle after it", title_justify="left")
    for name in ("kind", "count", "recovery median s", "recovery max s", "measured", "notes"):
        faults.add_column(name, justify="left" if name in ("kind", "notes") else "right")
    for kind, f in verdict.recovery.items():
        notes = []
        if f["away_s"]:
            label = "stopped" if kind == "sigstop" else "away"
            notes.append(f"{label} {min(f['away_s']):.1f}-{max(f['away_s']):.1f}s")
        if kind in ("sigkill", "sigkill-full", "sigstop"):
            held = [h for h in f["held"] if h is not None]
            notes.append(f"held {sum(held)} jobs in all")
        if f.get("filled"):
            notes.append(f"held/may hold {', '.join(f['filled'])}")
        if f["terminated"]:
            notes.append(f"backends terminated {sum(f['terminated'])}")
        if f["errors"]:
            notes.append(f"errors: {'; '.join(f['errors'])[:200]}")
        faults.add_row(
            kind,
            str(f["count"]),
            _s(f["median_s"]),
            _s(f["max_s"]),
            str(f["measured"]),
            escape(", ".join(notes)),
        )
    console.print(faults)

    procs = Table(title="processes (restarted by the soak when they exit)", title_justify="left")
    for name in (
        "process",
        "starts",
        "SIGKILLed",
        "exits on their own (codes)",
        "orphans after kill",
        "slots live at end / -c",
    ):
        procs.add_column(name, justify="left" if name == "process" else "right")
    slots = verdict.other.get("slots", {})
    for name, x in verdict.other["exits"].items():
        live = slots.get(name)
        procs.add_row(
            name,
            str(x["starts"]),
            str(x["planned_kills"]),
            ", ".join(str(c) for c in x["unplanned_exits"]) or "-",
            str(x["orphans"]),
            "-" if live is None else f"{live['live']}/{live['concurrency']}",
        )
    console.print(procs)

    specials = verdict.other.get("specials")
    if specials:
        console.print(
            "[bold]special kinds sent[/bold]: "
            + escape(", ".join(f"{k} x{v}" for k, v in specials.items()))
        )
    errors = verdict.other["send_errors"]
    if errors:
        console.print("[bold]sends that raised[/bold] (not counted as enqueued):")
        for workload, found in errors.items():
            console.print(
                f"  {workload}: " + escape(", ".join(f"{k} x{v}" for k, v in found.items()))
            )
    gets = verdict.other["gets"]
    if gets:
        console.print(
            "[bold]AsyncResult.get()[/bold]: "
            + escape(", ".join(f"{k} x{v}" for k, v in gets.items()))
        )
    for key, value in header.items():
        console.print(f"[bold]{escape(key)}[/bold]: {escape(str(value))}")
    for what, found in verdict.samples.items():
        if not found:
            continue
        console.print(f"[red]{escape(what)}[/red] ({len(found)}):")
        for line in found[:SAMPLES]:
            console.print("  " + escape(line))
