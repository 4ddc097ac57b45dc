"""The many-workers cell's table and targets (``many_workers``), kept apart for size.

Why it exists: the cell yields one point per (layout, process count), six figures each; read
as the generic cell table that is 72 rows. Here they are one row per point, in the order the
report shows them, plus the issue's two targets: throughput at the largest count not below the
1-process figure (per layout; spawn -> N-th done, and beside it the same from all workers up),
and no error or lost job at any count.

What it is not: the chart (``scale_chart``) or the measurement (``many_workers``).
"""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from . import cells
from .results import Results
from .targets import Target, _verdict


def points(results: Results) -> list[dict[str, Any]]:
    """The recorded points (first round), as the runner stored them in ``detail``."""
    return [d["scale"] for d in results.detail if d.get("cell") == cells.SCALE and "scale" in d]


def _all_up(p: dict[str, Any]) -> float:
    """The "all up" rate; NaN when not measured (a JSON file holds it as null)."""
    value = p.get("all_up_rate")
    return math.nan if value is None else float(value)


def _row(p: dict[str, Any]) -> list[str]:
    drain = p["drain"]
    rate = drain["jobs"] / drain["seconds"]
    span = drain["seconds"] - drain["first_seconds"]
    steady = (drain["jobs"] - drain["first_count"]) / span if span > 0 else float("nan")
    lost = drain["jobs"] - p["done"]
    up = _all_up(p)
    return [
        p["layout"],
        str(p["processes"]),
        "PgBouncer" if p["bouncer"] else "direct",
        f"{rate:,.0f}",
        f"{steady:,.0f}",
        "-" if math.isnan(up) else f"{up:,.0f}",
        f"{p['pickup_p50_ms']:,.0f}",
        f"{p['pickup_p99_ms']:,.0f}",
        str(p["server_connections"]),
        f"{lost} / {p['dead']} / {p['redelivered']}",
    ]


HEADERS = ("layout", "processes", "via", "jobs/s", "jobs/s 1st→Nth", "jobs/s all up",
           "pick-up p50 ms", "pick-up p99 ms", "server conns (max)", "lost / dead / redelivered")  # fmt: skip


def table(results: Results) -> Table | None:
    found = points(results)
    if not found:
        return None
    n = results.settings.get("scale_jobs", 0)
    out = Table(title=f"{cells.SCALE} (N={n:,} no-op jobs, -c 8 each)", title_justify="left")
    for h in HEADERS:
        out.add_column(h, justify="left" if h in ("layout", "via") else "right")
    for p in found:
        out.add_row(*_row(p))
    return out


def markdown(results: Results) -> str:
    """The same table as Markdown, for the docs."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(_row(p)) + " |" for p in points(results)]
    return "\n".join(lines) + "\n"


def targets(results: Results) -> list[Target]:
    found = points(results)
    if not found:
        return [Target("ujobs many workers", "not measured", "", "", None)]
    out: list[Target] = []
    for layout in dict.fromkeys(p["layout"] for p in found):
        mine = sorted((p for p in found if p["layout"] == layout), key=lambda p: p["processes"])
        first, last = mine[0], mine[-1]

        def rate(p: dict[str, Any]) -> float:
            return float(p["drain"]["jobs"]) / float(p["drain"]["seconds"])

        value = rate(last) / rate(first) if rate(first) else float("nan")
        warm = _all_up(last) / _all_up(first) if _all_up(first) else float("nan")
        for what, v in (("", value), (" (all up: start-up left out)", warm)):
            out.append(
                Target(
                    f"ujobs many workers, {layout}: jobs/s at {last['processes']} processes ÷ at "
                    f"{first['processes']}{what}",
                    "-" if math.isnan(v) else f"x{v:.2f}",
                    "",
                    "≥ 1",
                    _verdict(v, 1.0, None),
                    v,
                )
            )
    bad = sum(p["drain"]["jobs"] - p["done"] + p["dead"] + p["redelivered"] for p in found)
    out.append(
        Target(
            "ujobs many workers: jobs lost, dead or redelivered, all counts",
            f"{bad:,}",
            "",
            "≤ 0",
            "PASS" if bad == 0 else "MISS",
            float(bad),
        )
    )
    return out
