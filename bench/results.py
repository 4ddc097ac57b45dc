"""Every figure a run measured, per system, cell and round; plus errors and raw detail; as JSON.

Why it exists: the tables, the targets and the JSON file must all be computed from the same
numbers. A ``Row`` holds one figure's value for each round (rounds are interleaved across
systems, so per-round ratios pair measurements taken close together in time).

What it is not: presentation (``report.py``) or measurement (the system modules).
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .cells import median

UNITS = {
    "rate": "jobs/s",
    "rate_steady": "jobs/s",
    "p50": "ms",
    "p99": "ms",
    "rss_start": "MiB",
    "rss_peak": "MiB",
    "rss_end": "MiB",
    "ratio": "x",
    "pct": "%",
    "rows": "rows",
    "mib": "MiB",
    "ms": "ms",
    "cpu_us": "µs",
}
HIGHER_IS_BETTER = {"rate", "rate_steady"}


@dataclass
class Row:
    system: str
    cell: str
    label: str
    kind: str
    values: dict[int, float] = field(default_factory=dict)  # round -> value

    @property
    def unit(self) -> str:
        return UNITS[self.kind]

    @property
    def median(self) -> float:
        return median(list(self.values.values()))

    @property
    def low(self) -> float:
        return min(self.values.values(), default=float("nan"))

    @property
    def high(self) -> float:
        return max(self.values.values(), default=float("nan"))


@dataclass
class Results:
    settings: dict[str, Any]
    rows: dict[tuple[str, str, str], Row] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    systems: dict[str, dict[str, str]] = field(default_factory=dict)
    detail: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    machine: dict[str, Any] = field(default_factory=dict)  # machine_facts.facts_at_start()

    def add(self, system: str, cell: str, label: str, kind: str, rnd: int, value: float) -> None:
        key = (system, cell, label)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = Row(system, cell, label, kind)
        row.values[rnd] = value

    def error(self, system: str, cell: str, rnd: int | None, exc: BaseException) -> None:
        self.errors.append(
            {"system": system, "cell": cell, "round": rnd, "error": f"{type(exc).__name__}: {exc}"}
        )

    def find(self, system: str, cell: str, kind: str) -> list[Row]:
        return [
            r
            for r in self.rows.values()
            if r.system == system and r.cell == cell and r.kind == kind
        ]

    def first(self, system: str, cell: str, kind: str) -> Row | None:
        found = self.find(system, cell, kind)
        return found[0] if found else None

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "machine": self.machine
            or {
                "cores": self.settings.get("cores"),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "systems": self.systems,
            "date": time.strftime("%Y-%m-%d", time.gmtime(self.started_at)),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "figures": [
                {
                    **{k: v for k, v in asdict(r).items() if k != "values"},
                    "unit": r.unit,
                    "rounds": {str(k): v for k, v in sorted(r.values.items())},
                    "median": r.median,
                    "min": r.low,
                    "max": r.high,
                }
                for r in self.rows.values()
            ],
            "errors": self.errors,
            "detail": self.detail,
        }

    def write_json(self, path: Path, extra: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = self.to_json()
        doc.update(extra)
        path.write_text(json.dumps(_clean(doc), indent=2, allow_nan=False, default=str) + "\n")


def _clean(value: Any) -> Any:
    """NaN/inf (a figure that could not be computed) become null: the file stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
