"""How a figure is written in the bench's tables and targets: the digits its unit gets.

Why it exists: a cell table (``report.py``) and a target's measured text (``targets.py``) write
the same figure the same way, so both import this one function, which sits below either.

What it is not: the units themselves (``results.UNITS`` says which figure has which) or a table.
"""

from __future__ import annotations

import math


def fmt(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if unit == "jobs/s":
        return f"{value:,.0f}"
    if unit in ("ms", "x"):
        return f"{value:.2f}"
    if unit == "rows":
        return f"{value:,.0f}"
    return f"{value:.1f}"
