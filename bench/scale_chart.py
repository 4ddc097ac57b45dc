"""The many-workers chart: jobs/s and server connections against worker processes, as an SVG.

Why it exists: the issue asks for the many-workers figures drawn next to their table, and the
bench has no plotting dependency. Two panels side by side, x = worker processes on a log2 axis
(1, 2, 4 ... 32), one line per layout (one queue, 8 queues): throughput (spawn -> N-th done;
dashed: from all workers up, where measured) and the most server connections seen. A point drawn hollow had an error or a lost job.

What it is not: a general plotting library: just enough SVG for these two panels. Every text
written into it is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from .many_workers import LAYOUTS, ScalePoint

W, H = 420, 280  # one panel
LEFT, RIGHT, TOP, BOTTOM = 62, 14, 34, 46
COLOURS = ("#1f77b4", "#d62728")


def _nice_max(value: float) -> float:
    if value <= 0 or math.isnan(value):
        return 1.0
    mag = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * mag:
            return float(step * mag)
    return float(10 * mag)


def _panel(
    x0: int, title: str, points: Sequence[ScalePoint], value: Callable[[ScalePoint], float],
    fmt: Callable[[float], str], dashed: Callable[[ScalePoint], float] | None = None,
) -> list[str]:  # fmt: skip
    counts = sorted({p.processes for p in points})
    seen = [value(p) for p in points] + [dashed(p) for p in points] if dashed else []
    top = _nice_max(max((v for v in seen or [value(p) for p in points] if not math.isnan(v)),
                        default=1.0))  # fmt: skip
    lo, hi = math.log2(counts[0]), math.log2(counts[-1]) if counts else 1.0
    span = (hi - lo) or 1.0
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(n: int) -> float:
        return x0 + LEFT + (math.log2(n) - lo) / span * pw

    def py(v: float) -> float:
        return TOP + ph - (v / top) * ph

    out = [f'<text x="{x0 + W / 2}" y="18" text-anchor="middle" font-weight="bold">'
           f"{escape(title)}</text>",
           f'<rect x="{x0 + LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" '
           'stroke="#999"/>']  # fmt: skip
    for i in range(5):
        v = top * i / 4
        y = py(v)
        out.append(f'<line x1="{x0 + LEFT}" x2="{x0 + LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#eee"/>')  # fmt: skip
        out.append(f'<text x="{x0 + LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{escape(fmt(v))}</text>")  # fmt: skip
    for n in counts:
        out.append(f'<text x="{px(n):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{n}</text>')
    out.append(f'<text x="{x0 + LEFT + pw / 2}" y="{H - 8}" text-anchor="middle">'
               "worker processes (-c 8 each; PgBouncer from 8)</text>")  # fmt: skip
    for layout, colour in zip(LAYOUTS, COLOURS, strict=True):
        mine = sorted((p for p in points if p.layout == layout), key=lambda p: p.processes)
        if not mine:
            continue
        path = " ".join(f"{px(p.processes):.1f},{py(value(p)):.1f}" for p in mine)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        warm = [p for p in mine if dashed and not math.isnan(dashed(p))]
        if dashed and len(warm) > 1:
            path = " ".join(f"{px(p.processes):.1f},{py(dashed(p)):.1f}" for p in warm)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                       'stroke-width="1.5" stroke-dasharray="5,4"/>')  # fmt: skip
        for p in mine:
            fill = colour if p.clean else "white"
            out.append(f'<circle cx="{px(p.processes):.1f}" cy="{py(value(p)):.1f}" r="4" '
                       f'fill="{fill}" stroke="{colour}" stroke-width="2"/>')  # fmt: skip
    return out


def render(points: Sequence[ScalePoint], caption: str) -> str:
    """The SVG text of both panels, with a legend and ``caption`` (scale, machine) under them."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H + 40}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{2 * W}" height="{H + 40}" fill="white"/>',
        *_panel(0, "throughput, jobs/s (dashed: all workers up)", points,
                lambda p: p.drain.rate, lambda v: f"{v:,.0f}", lambda p: p.all_up_rate),
        *_panel(W, "server connections (max seen)", points,
                lambda p: float(p.server_connections), lambda v: f"{v:.0f}"),
    ]  # fmt: skip
    x = 20
    for layout, colour in zip(LAYOUTS, COLOURS, strict=True):
        parts.append(f'<line x1="{x}" x2="{x + 20}" y1="{H + 14}" y2="{H + 14}" '
                     f'stroke="{colour}" stroke-width="2"/>')  # fmt: skip
        parts.append(f'<text x="{x + 26}" y="{H + 18}">{escape(layout)}</text>')
        x += 110
    parts.append(f'<text x="{x + 10}" y="{H + 18}" fill="#555">{escape(caption)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write(points: Sequence[ScalePoint], caption: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(points, caption), encoding="utf-8")
    return path
