"""``pip install -e .`` works: the README's first command installs the checkout in editable mode,
and nothing else installs it so (``test_fresh_venv.py`` installs the built wheel). A copy of the
checkout's tracked files is installed with ``pip install --no-deps -e`` into a fresh venv; the
venv then imports the package from that copy (an edit there is seen without reinstalling), its
``ujobs-bridge`` script runs, the packages above the engine contribute their commands through the
entry points the editable install wrote, and ``db upgrade`` reads the migrations (package data)
through the editable finder.

Kept cheap: no dependency is installed. The fresh venv sees the test venv's packages through a
``.pth`` line naming that venv's site-packages (a plain path: the ``.pth`` files there, the test
venv's own editable install of the checkout among them, are not run), after its own
site-packages, so its own ``ujobs-bridge`` distribution is the one found. No build isolation:
the test venv's setuptools builds it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ujobs_bridge import __version__

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]

SHOW = """
import importlib.metadata as metadata
import ujobs_bridge
print(ujobs_bridge.__file__)
print(metadata.distribution("ujobs-bridge").locate_file(""))
"""


def tracked_copy(target: Path) -> Path:
    """The checkout's tracked files (what a fresh clone has), copied to ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    )
    for name in listed.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


def test_an_editable_install_of_the_checkout_runs_from_the_checkout(
    dsn: str, tmp_path: Path
) -> None:
    checkout = tracked_copy(tmp_path / "checkout")
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    Path(site, "test-venv-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-build-isolation", "--no-compile", "-e", str(checkout)],
        cwd=tmp_path, capture_output=True, text=True, timeout=500,
    )  # fmt: skip
    assert installed.returncode == 0, (installed.stdout + installed.stderr)[-4000:]

    shown = subprocess.run(
        [str(python), "-c", SHOW], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr[-4000:]
    module, distribution = shown.stdout.split()
    assert Path(module) == checkout / "ujobs_bridge" / "__init__.py"  # edits are seen
    assert Path(distribution).is_relative_to(venv)  # this venv's install, not the test venv's

    script = str(venv / "bin" / "ujobs-bridge")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    version = subprocess.run(
        [script, "--version"], env=env, capture_output=True, text=True, timeout=120
    )
    assert version.returncode == 0, version.stderr[-4000:]
    assert version.stdout.strip().endswith(__version__)
    helped = subprocess.run(
        [script, "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert {"migrate", "beat"} <= set(helped.stdout.split()), helped.stdout  # entry points
    upgraded = subprocess.run(
        [script, "db", "upgrade", "--dsn", dsn], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert upgraded.returncode == 0, (upgraded.stdout + upgraded.stderr)[-4000:]
    assert "up to date" in upgraded.stdout
