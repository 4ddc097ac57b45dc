"""The benchmark results page and its charts are the ones the committed runs draw.

``docs/bench/*.json`` are runs of ``python -m bench --json-out``, committed as they were written;
``docs/bench/results.md`` and one SVG per run are drawn from them by ``python -m bench.pages``.
Regenerating them here (no service, no subprocess) and comparing with the committed files fails
when a run was added or changed without its page, or the page was edited by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench is not an installed package
from bench import pages  # noqa: E402

RUNS = sorted((ROOT / "docs" / "bench").glob("*.json"))
REGENERATE = "python -m bench.pages docs/bench/*.json"


def test_committed_runs_carry_their_date_machine_facts_and_commit() -> None:
    assert RUNS, "no committed run under docs/bench/"
    for path in RUNS:
        run = json.loads(path.read_text())
        assert path.stem == run["date"], f"{path.name}: name it after its date, {run['date']}"
        machine = run["machine"]
        for fact in ("cores", "python_loop_iterations_per_s", "fdatasync_4k_ms", "commit",
                     "load_average_1m_start", "loaded_by_others"):  # fmt: skip
            assert machine.get(fact) is not None, f"{path.name}: machine fact {fact} missing"
        assert any(t.get("verdict") for t in run["targets"]), f"{path.name}: no target judged"


def test_the_results_page_and_charts_are_regenerated_from_the_runs() -> None:
    stale = [
        path.relative_to(ROOT).as_posix()
        for path, text in pages.render(RUNS).items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"stale or missing: {stale}; run `{REGENERATE}` and commit the result"


def test_each_run_has_a_chart_with_every_judged_target_and_the_page_shows_it() -> None:
    page = (ROOT / "docs" / "bench" / pages.PAGE_NAME).read_text()
    for path in RUNS:
        run = json.loads(path.read_text())
        svg = path.with_suffix(".svg").read_text()
        assert svg.startswith("<svg") and f"]({path.with_suffix('.svg').name})" in page
        for target in pages.judged(run["targets"]):
            assert f"{target.verdict}</text>" in svg
            assert f"| {target.verdict} |" in page
