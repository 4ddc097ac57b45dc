"""The project's own contracts: the README's two commands, CI running exactly the second one,
the package staying ``ruff`` and ``mypy --strict`` clean, the packages depending only downward
(engine <- celery_compat <- migrate, checked on every import of every module, with the check shown
catching one), and the engine running a ``@job`` app where Celery, kombu and redis cannot be
imported."""

from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from apps import basic_jobs
from conftest import wait_for
from ujobs_bridge.client import Client
from ujobs_bridge.dsn import ResolvedDatabase
from ujobs_bridge.introspect import Introspector

ROOT = Path(__file__).resolve().parents[2]
DEMO_COMMAND = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && ujobs-bridge demo"
)
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


# Their own xdist group, started first: the type check runs on one worker while the rest of the
# suite runs on the others (not in the serial path).
@pytest.mark.xdist_group("lint-types")
@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_package_is_lint_and_type_clean(tool: str) -> None:
    exe = shutil.which(tool, path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail(f"{tool} is not installed: install the test extra (pip install -e '.[test]')")
    args = (
        [exe, "check", "ujobs_bridge", "celery_compat", "migrate", "bench"]
        if tool == "ruff"
        else [exe]
    )
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


# -- layers: every package depends only downward ---------------------------------------------------
# ujobs_bridge (the engine) <- celery_compat (the facade) <- migrate (the drain). A package may
# import the packages below it, never one above it; the engine needs none of Celery's libraries.

PACKAGES = ("ujobs_bridge", "celery_compat", "migrate")
CELERY_LIBRARIES = ("celery", "kombu", "redis", "amqp", "vine", "billiard")
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "ujobs_bridge": ("celery_compat", "migrate", *CELERY_LIBRARIES),
    "celery_compat": ("migrate",),
    "migrate": (),
}


def imported_modules(
    source: str, module: str, *, is_package: bool = False
) -> list[tuple[int, str]]:
    """Every module ``source`` (the text of ``module``) imports, anywhere in it (inside functions
    and ``if TYPE_CHECKING:`` too), relative imports resolved to absolute names."""
    out: list[tuple[int, str]] = []
    package_parts = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            out.append((node.lineno, name))
            out += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return out


def upward_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """``module:line imports name`` for each import that points above ``module``'s package."""
    forbidden = FORBIDDEN[module.split(".")[0]]
    found = []
    for line, name in imported_modules(source, module, is_package=is_package):
        top = name.split(".")[0]
        if top in forbidden:
            found.append(f"{module}:{line} imports {name}")
    return sorted(set(found))


def package_modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out.append((".".join(parts), path))
    return out


def test_no_package_imports_upward() -> None:
    modules = package_modules()
    assert len(modules) > 100  # the walk found the packages
    upward = [
        hit
        for module, path in modules
        for hit in upward_imports(
            path.read_text(),
            module.removesuffix(".__init__"),
            is_package=path.name == "__init__.py",
        )
    ]
    assert upward == []


def test_the_layering_check_catches_an_upward_import() -> None:
    engine_module = """
from . import loading
from ..errors import ConfigError

def later():
    from celery_compat.execution import jobs_for_app   # inside a function
    import kombu.messaging
"""
    assert upward_imports(engine_module, "ujobs_bridge.cli.worker") == [
        "ujobs_bridge.cli.worker:6 imports celery_compat.execution",
        "ujobs_bridge.cli.worker:6 imports celery_compat.execution.jobs_for_app",
        "ujobs_bridge.cli.worker:7 imports kombu.messaging",
    ]
    # a relative import is resolved before it is judged: from celery_compat/x.py, `..migrate`
    # is the top-level `migrate` package
    assert upward_imports("from ..migrate import runner\n", "celery_compat.x") == [
        "celery_compat.x:1 imports migrate",
        "celery_compat.x:1 imports migrate.runner",
    ]
    assert upward_imports("from ujobs_bridge import loading\n", "celery_compat.x") == []
    assert upward_imports("import celery_compat, ujobs_bridge\n", "migrate.x") == []


# -- the engine runs without Celery ----------------------------------------------------------------

NO_CELERY = """
import importlib.abc, sys
BLOCKED = {blocked!r}

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{name!r}} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, Blocker())
"""

ENGINE_RUN = """
import threading, time
from apps import basic_jobs
from ujobs_bridge import loading
from ujobs_bridge.client import Client
from ujobs_bridge.db import schema
from ujobs_bridge.dsn import ResolvedDatabase
from ujobs_bridge.introspect import Introspector
from ujobs_bridge.worker import Worker, WorkerConfig

dsn = sys.argv[1]
schema.upgrade(dsn)
app = loading.resolve("apps.basic_jobs")  # -A through the loaders: the Celery one is unavailable
jobs = loading.jobs_of(app)
with Client(ResolvedDatabase(dsn, "flag", ""), max_size=2) as client:
    ref = basic_jobs.add.configure(client=client).enqueue(2, 3)
worker = Worker(dsn, jobs, WorkerConfig(queues=("basic",), poll_s=0.05), channels=app.channels())
worker.start()
introspector = Introspector(dsn)
deadline = time.monotonic() + 30
while introspector.get(ref.id).state.value != "done" and time.monotonic() < deadline:
    threading.Event().wait(0.05)
worker.stop(timeout_s=5)
record = introspector.get(ref.id)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED + ("celery_compat", "migrate"))
print(record.state.value, record.output, loaded)
"""


def _run_blocked(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = NO_CELERY.format(blocked=CELERY_LIBRARIES) + code
    env = {k: v for k, v in os.environ.items() if k != "UJOBS_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT / "tests",
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_the_engine_runs_a_job_app_where_celery_cannot_be_imported(dsn: str) -> None:
    result = _run_blocked(ENGINE_RUN, dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split("\n")[0] == "done 5 []", result.stdout + result.stderr


def test_a_job_app_does_not_import_celery_where_it_is_installed() -> None:
    """The Celery loader is consulted only once ``celery`` is imported: ``-A`` on a plain ``@job``
    module pays neither its start-up time nor its memory; ``-A`` on a Celery app still finds it."""
    probe = (
        "import sys\n"
        "from ujobs_bridge import loading\n"
        "plain = loading.resolve('apps.basic_jobs')\n"
        "print(type(plain).__name__, 'celery' in sys.modules)\n"
        "app = loading.resolve('apps.celery_plain')\n"
        "print(type(app).__name__, 'celery' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT / "tests",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    plain, app = result.stdout.splitlines()
    assert plain == "LoadedApp False"
    assert app.endswith(" True") and not app.startswith("LoadedApp "), app


def test_the_cli_without_celery_lists_every_command_and_explains_the_missing_ones() -> None:
    cli = "from ujobs_bridge.cli import cli\ncli(sys.argv[1:], prog_name='ujobs-bridge')\n"
    listed = _run_blocked(cli, "--help")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    for name in (
        "db",
        "worker",
        "jobs",
        "demo",
        "events",
        "purge",
        "outbox",
        "scheduler",
        "tasks",
        "migrate",
        "beat",
    ):
        assert f"  {name} " in listed.stdout, listed.stdout
    missing = _run_blocked(cli, "migrate", "-A", "proj")
    assert missing.returncode == 1
    assert "the `migrate` command" in missing.stderr and "unavailable" in missing.stderr, (
        missing.stderr
    )
    assert "celery" in missing.stderr or "kombu" in missing.stderr, missing.stderr


CLI_WORKER = """
import runpy
sys.argv = ["ujobs-bridge", *sys.argv[1:]]
runpy.run_module("ujobs_bridge", run_name="__main__")
"""


def test_the_worker_command_runs_a_job_app_where_celery_cannot_be_imported(
    dsn: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if k != "UJOBS_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    script = NO_CELERY.format(blocked=CELERY_LIBRARIES) + CLI_WORKER
    args = ["worker", "-A", "apps.basic_jobs", "-Q", "basic", "--poll", "0.05", "--dsn", dsn]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            cwd=ROOT / "tests",
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: " ready: " in log.read_text(), timeout=30, what="the worker ready")
        with Client(ResolvedDatabase(dsn, "flag", ""), max_size=1) as client:
            ref = basic_jobs.add.configure(client=client).enqueue(20, 22)
        introspector = Introspector(dsn)
        wait_for(lambda: introspector.get(ref.id).state.value == "done", what="the job done")
        assert introspector.get(ref.id).output == 42
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
