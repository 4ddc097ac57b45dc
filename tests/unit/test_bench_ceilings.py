"""The bench's raw ceilings reach the report: each one against its goal's own denominator.

``python -m bench`` prints, beside the ``.delay()`` and step goals, what a bare Postgres gives
(``raw_send``, ``RawSystem.step_ceiling``). These build a run's figures by hand (no service, no
subprocess) and read the targets and the step table a reader of the report would see.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench is not an installed package
from bench import cells, report, targets  # noqa: E402
from bench.results import Results  # noqa: E402

DELAY_OFF = targets.DELAY_OFF


def run_with(figures: dict[tuple[str, str, str], tuple[float, float]]) -> Results:
    results = Results(settings={"systems": ["ujobs", "celery-compat", "celery-redis", "raw"]})
    for (system, cell, label), rounds in figures.items():
        for rnd, value in enumerate(rounds):
            results.add(system, cell, label, "rate", rnd, value)
    return results


def by_name(results: Results) -> dict[str, targets.Target]:
    return {t.name: t for t in targets.targets(results)}


def test_the_send_ceilings_stand_against_celery_and_the_bridge_against_them() -> None:
    results = run_with(
        {
            ("celery-redis", cells.DELAY_ONE, ".delay()"): (2000.0, 2000.0),
            ("raw", cells.DELAY_ONE, cells.DELAY_CEILING): (1600.0, 1600.0),
            ("raw", cells.DELAY_ONE, cells.DELAY_CEILING_OFF): (2400.0, 2400.0),
            ("celery-compat", cells.DELAY_ONE, ".delay() (each one a commit)"): (1200.0, 1200.0),
            ("celery-compat", cells.DELAY_ONE, DELAY_OFF): (1800.0, 1800.0),
        }
    )
    got = by_name(results)
    expected = {
        "raw ceiling: Celery .delay(), its message one INSERT ÷ Celery+Redis .delay()": 0.8,
        "raw ceiling, synchronous_commit=off ÷ Celery+Redis .delay()": 1.2,
        "celery_compat .delay() one by one ÷ the raw ceiling": 0.75,
        'celery_compat .delay(), ujobs_send_commit="off" ÷ the raw ceiling, '
        "synchronous_commit=off": 0.75,
    }
    for name, value in expected.items():
        target = got[name]
        assert target.goal == "informational" and target.verdict is None
        assert target.value is not None and abs(target.value - value) < 1e-9, name


def test_a_run_without_the_raw_system_says_not_measured() -> None:
    results = run_with({("celery-redis", cells.DELAY_ONE, ".delay()"): (2000.0, 2000.0)})
    target = by_name(results)["raw ceiling, synchronous_commit=off ÷ Celery+Redis .delay()"]
    assert target.measured == "not measured" and target.value is None


def test_the_step_ceiling_is_read_against_the_goals_plain_job() -> None:
    plain = cells.PLAIN_LABEL + cells.STEADY
    results = run_with(
        {
            ("ujobs", cells.STEPS, plain): (8000.0, 8000.0),
            ("ujobs", cells.STEPS, cells.STEPS_LABEL + cells.STEADY): (1000.0, 1000.0),
            ("raw", cells.STEPS, cells.STEP_CEILING): (2000.0, 2000.0),
        }
    )
    ceiling = next(t for t in targets.targets(results) if t.name.startswith("raw ceiling: job"))
    assert ceiling.value == 0.25 and ceiling.verdict is None
    out = io.StringIO()
    table = report.steps_table(results)
    assert table is not None
    Console(file=out, width=250).print(table)
    text = out.getvalue()
    raw_line = next(line for line in text.splitlines() if "raw SKIP LOCKED" in line)
    assert "x0.25" in raw_line  # the raw jobs against ujobs-bridge's plain job, not "-"
    assert "no durable steps" not in raw_line
    assert any("Celery+Redis" in line and "no durable steps" in line for line in text.splitlines())
