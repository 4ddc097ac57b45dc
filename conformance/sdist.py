"""Fetch the celery sdist matching the installed celery and lay out the test trees to run.

Why it exists: Celery's integration tests ship only in its source distribution, and they must
match the celery the bridge runs on. ``pip download --no-deps --no-binary :all:
celery==<installed>`` puts the tarball in the cache once; the test files (and the ``t``
modules they import, found by reading their imports) are extracted from it; each run then gets
a fresh copy of that tree. The bridge tree keeps Celery's ``conftest.py`` as
``celery_conftest.py`` and puts ``shim_conftest.py`` in its place.

What it is not: a vendoring step. Nothing extracted here is ever written inside the repository.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOTS = (
    "t/integration/test_tasks.py",
    "t/integration/test_canvas.py",
    "t/integration/tasks.py",
    "t/integration/conftest.py",
)
IMPORT_RE = re.compile(
    r"^\s*(?:from\s+(\.+[\w.]*|t(?:\.[\w]+)+)\s+import\s+([\w, ()\s]+)|import\s+(t\.[\w.]+))", re.M
)


def cache_dir() -> Path:
    """``$UJOBS_CONFORMANCE_CACHE``, else ``$UJOBS_HOME/conformance``, else ``~/.cache/ujobs-conformance``."""
    explicit = os.environ.get("UJOBS_CONFORMANCE_CACHE")
    if explicit:
        return Path(explicit)
    home = os.environ.get("UJOBS_HOME")
    if home:
        return Path(home) / "conformance"
    return Path.home() / ".cache" / "ujobs-conformance"


def celery_version() -> str:
    return importlib.metadata.version("celery")


def download(version: str, cache: Path) -> Path:
    """The sdist tarball for ``celery==version``, downloaded once into ``cache/downloads``."""
    target = cache / "downloads"
    found = sorted(target.glob(f"celery-{version}.tar.gz"))
    if found:
        return found[0]
    target.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        f"celery=={version}",
        "-d",
        str(target),
        "--quiet",
    ]
    subprocess.run(cmd, check=True)
    found = sorted(target.glob(f"celery-{version}.tar.gz"))
    if not found:
        raise RuntimeError(f"pip download left no celery-{version}.tar.gz in {target}")
    return found[0]


def _module_files(module: str, importer: str) -> list[str]:
    """Candidate paths (inside the sdist) for a module imported from ``importer``."""
    if module.startswith("."):
        dots = len(module) - len(module.lstrip("."))
        base = Path(importer).parent
        for _ in range(dots - 1):
            base = base.parent
        rest = module.lstrip(".")
        stem = base / rest.replace(".", "/") if rest else base
    else:
        stem = Path(module.replace(".", "/"))
    return [f"{stem}.py", f"{stem}/__init__.py"]


def extract(tarball: Path, dest: Path) -> Path:
    """Extract the integration tests and every ``t`` module they import into ``dest/src``."""
    src = dest / "src"
    if (src / ".complete").exists():
        return src
    shutil.rmtree(src, ignore_errors=True)
    with tarfile.open(tarball) as tar:
        prefix = tar.getnames()[0].split("/")[0]
        members = {n[len(prefix) + 1 :]: n for n in tar.getnames() if n.startswith(prefix + "/")}

        def read(rel: str) -> str | None:
            name = members.get(rel)
            if name is None:
                return None
            handle = tar.extractfile(name)
            return None if handle is None else handle.read().decode("utf-8")

        wanted = list(ROOTS)
        done: set[str] = set()
        while wanted:
            rel = wanted.pop()
            if rel in done:
                continue
            text = read(rel)
            if text is None:
                continue
            done.add(rel)
            out = src / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            parts = Path(rel).parts
            for i in range(1, len(parts)):  # every package on the way needs its __init__
                wanted.append(str(Path(*parts[:i]) / "__init__.py"))
            for match in IMPORT_RE.finditer(text):
                module = match.group(1) or match.group(3)
                names = [n.strip(" ()") for n in (match.group(2) or "").split(",")]
                for candidate in _module_files(module, rel):
                    wanted.append(candidate)
                for name in names:  # `from . import tasks` names a module
                    if name and module.startswith("."):
                        wanted.extend(
                            _module_files(f"{module}.{name}" if module != "." else f".{name}", rel)
                        )
        licence = read("LICENSE")
        if licence is not None:
            (src / "CELERY_LICENSE").write_text(licence)
    (src / ".complete").write_text(f"{tarball.name}\n")
    return src


INI = """[pytest]
python_classes = test_*
xfail_strict = true
markers =
    flaky: Celery's rerun marker (pytest-rerunfailures is not used here)
    timeout: pytest-timeout
    amqp: Celery's RabbitMQ-only tests
    celery: Celery's config override marker
"""


def run_tree(src: Path, dest: Path, target: str) -> Path:
    """A fresh copy of the extracted tree for one run; the bridge tree gets the shim conftest."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".complete", "__pycache__"))
    (dest / "pytest.ini").write_text(INI)
    if target == "bridge":
        integration = dest / "t" / "integration"
        (integration / "conftest.py").rename(integration / "celery_conftest.py")
        shutil.copy(HERE / "shim_conftest.py", integration / "conftest.py")
    return dest
