"""Side-by-side report of the two conformance runs: a table per test file, then the differences.

Why it exists: the point of the suite is the comparison. Counts per file for Celery+Redis and
for the bridge, then every test that passes on Celery and not on the bridge, with the first
line of its failure and the known reason (``known.py``), then the reverse list. The same data
goes to JSON for tooling.

What it is not: a judge of which side is right; the reasons in ``known.py`` are.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from .known import reason_for

COLUMNS = ("passed", "failed", "skipped", "error", "not run")
PASSING = ("passed", "xpassed")


def _bucket(status: str) -> str:
    if status in PASSING:
        return "passed"
    if status in ("skipped", "xfailed"):
        return "skipped"
    return status


def counts(outcomes: dict[str, dict[str, Any]]) -> dict[str, Counter[str]]:
    per_file: dict[str, Counter[str]] = {}
    for node, entry in outcomes.items():
        path = node.split("::", 1)[0]
        per_file.setdefault(path, Counter())[_bucket(entry["status"])] += 1
    return per_file


def differences(
    celery: dict[str, dict[str, Any]], bridge: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(passes on Celery but not on the bridge, passes on the bridge but not on Celery)."""
    worse: list[dict[str, Any]] = []
    better: list[dict[str, Any]] = []
    for node in sorted(set(celery) | set(bridge)):
        c = celery.get(node, {"status": "absent", "message": ""})
        b = bridge.get(node, {"status": "absent", "message": ""})
        if c["status"] in PASSING and b["status"] not in PASSING:
            worse.append(
                {
                    "test": node,
                    "bridge": b["status"],
                    "first_line": b["message"],
                    "reason": reason_for(node),
                }
            )
        elif b["status"] in PASSING and c["status"] not in PASSING and c["status"] != "absent":
            better.append({"test": node, "celery": c["status"], "first_line": c["message"]})
    return worse, better


def _short(node: str) -> str:
    return node.replace("t/integration/", "")


def render(
    celery: dict[str, dict[str, Any]] | None,
    bridge: dict[str, dict[str, Any]] | None,
    meta: dict[str, Any],
) -> str:
    lines: list[str] = []
    sides = [("Celery+Redis", celery), ("bridge", bridge)]
    per = {label: counts(o) for label, o in sides if o is not None}
    files = sorted({f for c in per.values() for f in c})
    head = f"{'file':<22}"
    for label in per:
        head += " | " + f"{label:^43}"
    lines.append(head)
    sub = " " * 22
    for _ in per:
        sub += " | " + " ".join(f"{c:>8}" for c in COLUMNS)
    lines.append(sub)
    lines.append("-" * len(sub))
    totals = {label: Counter[str]() for label in per}
    for path in files:
        row = f"{_short(path):<22}"
        for label, c in per.items():
            got = c.get(path, Counter())
            totals[label].update(got)
            row += " | " + " ".join(f"{got.get(k, 0):>8}" for k in COLUMNS)
        lines.append(row)
    row = f"{'total':<22}"
    for label in per:
        row += " | " + " ".join(f"{totals[label].get(k, 0):>8}" for k in COLUMNS)
    lines.append(row)
    for label in per:
        info = meta.get(label, {})
        cut = " (cut by the budget)" if info.get("cut") else ""
        lines.append(f"{label}: {info.get('elapsed', 0):.0f}s{cut}")
    if celery is not None and bridge is not None:
        worse, better = differences(celery, bridge)
        lines.append("")
        lines.append(f"Pass on Celery+Redis, not on the bridge: {len(worse)}")
        for item in worse:
            lines.append(f"  {_short(item['test'])}  [{item['bridge']}]")
            if item["first_line"]:
                lines.append(f"      {item['first_line'][:160]}")
            if item["reason"]:
                lines.append(f"      why: {item['reason']}")
        lines.append("")
        lines.append(f"Pass on the bridge, not on Celery+Redis: {len(better)}")
        for item in better:
            lines.append(f"  {_short(item['test'])}  [celery: {item['celery']}]")
    return "\n".join(lines)


def write_json(
    path: Path,
    celery: dict[str, dict[str, Any]] | None,
    bridge: dict[str, dict[str, Any]] | None,
    meta: dict[str, Any],
) -> None:
    data: dict[str, Any] = {"meta": meta, "celery": celery, "bridge": bridge}
    if celery is not None and bridge is not None:
        worse, better = differences(celery, bridge)
        data["pass_on_celery_not_on_bridge"] = worse
        data["pass_on_bridge_not_on_celery"] = better
    data["counts"] = {
        label: {f: dict(c) for f, c in counts(o).items()}
        for label, o in (("celery", celery), ("bridge", bridge))
        if o is not None
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str))
