"""No comment or docstring in the code cites a measured figure.

Why: a timing, a module count or a speed-up written beside the code was true on one machine on
one day and goes stale without anything noticing. Figures belong to the bench's output and the
committed benchmark results (``docs/bench/``); a comment says what the code does and why.

What it catches (precise shapes of a measurement, not every number): a duration in microseconds,
an approximate duration (``~15 ms``), a count of imported modules, "N x faster/slower", "N %
faster/slower" and "measured on". A configured value ("polls every 20 ms", "5 ms doubling")
is a design fact and is left alone.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ujobs_bridge", "celery_compat", "migrate", "bench", "tests")

MEASURED = re.compile(
    r"\d[\d,.]*\s?(?:µs|μs|us)\b"  # microseconds
    r"|~\s?\d[\d,.]*\s?(?:ns|µs|μs|us|ms|s|seconds|KB|MB|MiB|%|x)(?!\w)"  # an approximate figure
    r"|\(\s*~?\d+ modules\)|\b\d+ modules\)"  # a count of imported modules
    r"|\b\d[\d.]*\s?(?:x|\u00d7|%)\s?(?:faster|slower|cheaper|more expensive)\b"
    r"|\bmeasured on\b",
    re.IGNORECASE,
)


def _texts(path: Path) -> list[tuple[int, str]]:
    """Every comment and docstring of ``path``, with its first line number."""
    source = path.read_text(encoding="utf-8")
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and node.body:
                found.append((node.body[0].lineno, doc))
    return found


def figures_in(path: Path) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}"
        for line, text in _texts(path)
        for match in MEASURED.finditer(text)
    ]


def test_no_comment_or_docstring_cites_a_measured_figure() -> None:
    found = [
        hit
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if ".venv" not in path.parts and path != Path(__file__).resolve()
        for hit in figures_in(path)
    ]
    assert not found, "say what the code does and why, without the figure:\n" + "\n".join(found)


def test_the_shapes_it_catches_and_the_ones_it_leaves(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Parsing costs 12 us a call."""\n'
        "# import cost: Celery's Request (~15 ms) loads lazily\n"
        "# the tracer (165 modules) loads in a worker\n"
        "# this is 3x faster than a loop; parsing costs ~5x the lookup\n"
        "# polls every 20 ms; backoff 5 ms doubling; jittered by ±50 %\n"
    )
    hits = sorted(h.split(": ", 1)[1] for h in figures_in_any(sample))
    assert hits == ["'(165 modules)'", "'12 us'", "'3x faster'", "'~15 ms'", "'~5x'"]


def figures_in_any(path: Path) -> list[str]:
    """``figures_in`` for a file outside the project (the test's own sample)."""
    return [
        f"{path.name}:{line}: {match.group(0)!r}"
        for line, text in _texts(path)
        for match in MEASURED.finditer(text)
    ]
