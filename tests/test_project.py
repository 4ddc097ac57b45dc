"""The project's own contracts: the README's two commands, CI running exactly the second one,
and the package staying ``ruff`` and ``mypy --strict`` clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && ujobs-bridge demo"
TEST_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest"


def test_readme_starts_with_the_two_commands() -> None:
    lines = [line for line in (ROOT / "README.md").read_text().splitlines() if line.strip()]
    first_commands = [line for line in lines[:15] if line.startswith("python3 -m venv")]
    assert first_commands[:2] == [DEMO_COMMAND, TEST_COMMAND]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    assert script[-1] == TEST_COMMAND


def test_py_typed_is_shipped() -> None:
    for pkg in ("ujobs_bridge", "celery_compat", "migrate"):
        assert (ROOT / pkg / "py.typed").exists()


@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_package_is_lint_and_type_clean(tool: str) -> None:
    exe = shutil.which(tool, path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail(f"{tool} is not installed: install the test extra (pip install -e '.[test]')")
    args = [exe, "check", "ujobs_bridge", "celery_compat", "migrate", "bench"] if tool == "ruff" else [exe]
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
