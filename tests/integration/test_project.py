"""The project's own contracts: the README's two commands, CI running exactly the second one,
the package staying ``ruff`` and ``mypy --strict`` clean, the packages depending only downward
(engine <- celery_compat <- migrate, checked on every import of every module, with the check shown
catching one), no import circles among the modules (nor imports inside functions without a reason
comment), each check shown catching one, and the engine running a ``@job`` app where Celery, kombu
and redis cannot be imported."""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import ujobs_bridge
from apps import basic_jobs
from conftest import wait_for
from ujobs_bridge._internal.config.dsn import ResolvedDatabase
from ujobs_bridge._internal.observe.introspect import Introspector
from ujobs_bridge.client import Client

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
    for pkg in ("ujobs_bridge", "celery_compat", "migrate", "ujobs_django"):
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
        [exe, "check", "ujobs_bridge", "celery_compat", "migrate", "ujobs_django", "bench"]
        if tool == "ruff"
        else [exe]
    )
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


# -- layers: every package depends only downward ---------------------------------------------------
# ujobs_bridge (the engine) <- celery_compat (the facade) <- migrate (the drain). A package may
# import the packages below it, never one above it; the engine needs none of Celery's libraries.
# ujobs_django (Django's django.tasks backend, admin and manage.py commands) stands on the engine:
# nothing imports it; for a project with django-celery-beat installed its scheduler command
# loads celery_compat (and with it Celery), inside the functions that need them, never at import.

PACKAGES = ("ujobs_bridge", "celery_compat", "migrate", "ujobs_django")
CELERY_LIBRARIES = ("celery", "kombu", "redis", "amqp", "vine", "billiard")
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "ujobs_bridge": ("celery_compat", "migrate", "ujobs_django", *CELERY_LIBRARIES),
    "celery_compat": ("migrate", "ujobs_django"),
    "migrate": ("ujobs_django",),
    "ujobs_django": ("migrate",),
}
# ujobs_django's imports of celery_compat and Celery stay inside functions (checked below).
LAZY_ONLY: dict[str, tuple[str, ...]] = {"ujobs_django": ("celery_compat", *CELERY_LIBRARIES)}


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


# The engine's declared surface: what a user imports (the root, the modules its names live in,
# the test kit) and what the packages above it build on (``ujobs_bridge.ext``). Everything else is
# ``ujobs_bridge._internal``, which no upper package may import.
ENGINE_SURFACE = (
    "ujobs_bridge",
    "ujobs_bridge.client",
    "ujobs_bridge.errors",
    "ujobs_bridge.job",
    "ujobs_bridge.records",
    "ujobs_bridge.steps",
    "ujobs_bridge.testing",
    "ujobs_bridge.ext",
)


def on_engine_surface(name: str) -> bool:
    """Is ``name`` (a module, or a name imported from one) on the engine's declared surface?"""
    if name.startswith("ujobs_bridge._internal") or ".ext._" in name:
        return False
    if name in ENGINE_SURFACE[1:] or any(name.startswith(m + ".") for m in ENGINE_SURFACE[1:]):
        return True
    # ``from ujobs_bridge import X``: X is a name the root exports, not a submodule reached around it
    return (
        name.count(".") == 1 and name.split(".")[1] in ujobs_bridge.__all__
    ) or name == "ujobs_bridge"


def upward_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """``module:line imports name`` for each import that points above ``module``'s package, or,
    from an upper package, into the engine's internals."""
    forbidden = FORBIDDEN[module.split(".")[0]]
    upper = module.split(".")[0] != "ujobs_bridge"
    found = []
    for line, name in imported_modules(source, module, is_package=is_package):
        top = name.split(".")[0]
        if top in forbidden or (upper and top == "ujobs_bridge" and not on_engine_surface(name)):
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


def test_ujobs_django_loads_celery_only_inside_functions() -> None:
    """celery_compat and Celery's libraries never load when ujobs_django is imported: no
    module-level import of them (``LAZY_ONLY``), so a django.tasks project needs no Celery."""
    at_import = []
    for module, path in package_modules():
        lazy = LAZY_ONLY.get(module.split(".")[0], ())
        for node in ast.parse(path.read_text()).body:
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            at_import += [f"{module}:{node.lineno} {n}" for n in names if n.split(".")[0] in lazy]
    assert at_import == []


def test_the_layering_check_catches_an_upward_import() -> None:
    engine_module = """
from . import loading
from ..errors import ConfigError

def later():
    from celery_compat.execution import jobs_for_app
    import kombu.messaging
"""
    assert upward_imports(engine_module, "ujobs_bridge._internal.cli.worker") == [
        "ujobs_bridge._internal.cli.worker:6 imports celery_compat.execution",
        "ujobs_bridge._internal.cli.worker:6 imports celery_compat.execution.jobs_for_app",
        "ujobs_bridge._internal.cli.worker:7 imports kombu.messaging",
    ]
    # a relative import is resolved before it is judged: from celery_compat/x.py, `..migrate`
    # is the top-level `migrate` package
    assert upward_imports("from ..migrate import runner\n", "celery_compat.x") == [
        "celery_compat.x:1 imports migrate",
        "celery_compat.x:1 imports migrate.runner",
    ]
    assert upward_imports("from ujobs_bridge import job, connect\n", "celery_compat.x") == []
    assert upward_imports("from ujobs_bridge.ext.worker import InFlight\n", "migrate.x") == []
    # an upper package reaching into the engine's machinery is refused, however it spells it
    assert upward_imports(
        "from ujobs_bridge._internal.worker import loop\nfrom ujobs_bridge import _internal\n",
        "celery_compat.x",
    ) == [
        "celery_compat.x:1 imports ujobs_bridge._internal.worker",
        "celery_compat.x:1 imports ujobs_bridge._internal.worker.loop",
        "celery_compat.x:2 imports ujobs_bridge._internal",
    ]


def test_every_engine_module_outside_internal_is_declared_surface() -> None:
    """A new top-level engine module is a decision: public (listed) or ``_internal``."""
    outside = [
        m
        for m, _ in package_modules()
        if m.startswith("ujobs_bridge.") and not m.startswith("ujobs_bridge._internal")
    ]
    undeclared = [
        m
        for m in outside
        if not on_engine_surface(m.removesuffix(".__init__"))
        and m != "ujobs_bridge.__main__"
        and m != "ujobs_bridge.__init__"
    ]
    assert undeclared == []
    assert upward_imports("import celery_compat, ujobs_bridge\n", "migrate.x") == []


# -- no import circles -----------------------------------------------------------------------------
# A module's imports form a graph; a circle in it (a strongly connected component of more than one
# module) means neither module can be understood, tested or moved without the other, and the
# import order decides whether a name exists yet. Every import counts: module level, inside a
# function (it runs later, but it runs) and under ``if TYPE_CHECKING:`` (the types are a
# dependency too). Importing ``a.b.c`` runs ``a`` and ``a.b`` first, so those packages are edges
# too, except the importer's own packages (already being imported before it); ``from pkg import
# name``, a name ``pkg/__init__.py`` defines, is an edge to that ``__init__`` even from inside
# ``pkg``, since the name exists only once it has run.


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules of ``sources`` it imports; ``sources``: module -> (its text, whether
    it is a package's ``__init__``)."""

    def known(name: str) -> str | None:  # the longest prefix of ``name`` that is a module here
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name or None

    def ancestors(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts))]

    graph: dict[str, set[str]] = {module: set() for module in sources}
    for module, (source, is_package) in sources.items():
        own_packages = set(ancestors(module)) | ({module} if is_package else set())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets = [(alias.name, False) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                package_parts = module.split(".") if is_package else module.split(".")[:-1]
                base = package_parts[: len(package_parts) - (node.level - 1)] if node.level else []
                origin = ".".join([*base, *([node.module] if node.module else [])])
                # ``from origin import x``: the submodule ``origin.x``, else a name of ``origin``
                targets = [
                    (f"{origin}.{alias.name}", False)
                    if f"{origin}.{alias.name}" in sources
                    else (origin, True)
                    for alias in node.names
                ]
            else:
                continue
            for name, wants_a_name in targets:
                target = known(name)
                if target is None:
                    continue  # outside the three packages
                graph[module] |= {p for p in ancestors(target) if p in sources} - own_packages
                if wants_a_name or target not in own_packages:
                    graph[module].add(target)
        graph[module].discard(module)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(circles)


def test_no_import_circles() -> None:
    sources = {
        module.removesuffix(".__init__"): (path.read_text(), path.name == "__init__.py")
        for module, path in package_modules()
    }
    graph = import_graph(sources)
    assert sum(map(len, graph.values())) > 1000  # the walk found the imports
    assert import_circles(graph) == []


def test_the_circle_check_catches_a_circle() -> None:
    sources = {
        # a package that re-exports: importing any of its modules from outside runs this first
        "pkg": ("from pkg.b import B\n", True),
        "pkg.a": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n",
            False,
        ),
        "pkg.b": ("def later():\n    from pkg.a import A\n", False),  # inside a function
        "pkg.c": ("from pkg import B\n", False),  # a name of pkg/__init__.py
        "pkg.d": ("import pkg.a\nfrom pkg import c\n", False),  # a leaf: imports, is not imported
        "lib": ("", True),
        "lib.x": ("from lib import y\n", False),  # the submodule lib.y; lib runs first: light
        "lib.y": ("import json\n", False),
        "app": ("import lib.x\nfrom pkg.d import D\n", False),
    }
    graph = import_graph(sources)
    assert graph["app"] == {"lib", "lib.x", "pkg", "pkg.d"}
    assert graph["lib.x"] == {"lib.y"}
    assert import_circles(graph) == [["pkg", "pkg.a", "pkg.b", "pkg.c"]]
    # cut at the seam (pkg/__init__.py re-exports nothing): no circle is left
    sources["pkg"] = ('"""A package that imports nothing."""\n', True)
    assert import_circles(import_graph(sources)) == []


# -- imports inside functions say why --------------------------------------------------------------
# An import belongs at the top of its module, where a reader sees what the module depends on. One
# inside a function is kept only for a reason, said in a comment starting with the reason's tag:
#   ``# import cost: ...``    measured, on a start-up path (``--help``, ``import ujobs_bridge``, a
#                             worker's start-up; the lazy names of a package root, PEP 562)
#   ``# optional: ...``       a dependency that may be absent (the dashboard extra, Django...)
#   ``# child process: ...``  what only a child process (after a fork or spawn) needs
#   ``# lazy: ...``           an import with an effect wanted only on that path (e.g. one that
#                             registers a task, or builds an app)
# on the import's line, in the comments right above it (above the first of several imports in a
# row), or right above the ``def`` when the function exists to import lazily (``__getattr__``).

REASON = re.compile(r"#\s*(import cost|optional|child process|lazy):")


def imports_without_reason(source: str) -> list[int]:
    """The line of each import inside a function of ``source`` that gives no reason."""
    lines = source.splitlines()
    tree = ast.parse(source)
    owner: dict[ast.stmt, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    owner.setdefault(inner, node)
    import_lines = {n for imp in owner for n in range(imp.lineno, (imp.end_lineno or 0) + 1)}

    def said_above(line: int) -> bool:  # a reason in the comment block ending above ``line``
        line -= 1
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            if REASON.search(lines[line - 1]):
                return True
            line -= 1
        return False

    def reasoned(imp: ast.stmt, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        end = imp.end_lineno or imp.lineno
        if any(REASON.search(lines[n - 1]) for n in range(imp.lineno, end + 1)):
            return True
        first = imp.lineno
        while first - 1 in import_lines:  # the first of the imports in a row
            first -= 1
        top = min([function.lineno, *(d.lineno for d in function.decorator_list)])
        return said_above(first) or said_above(top)

    return sorted(imp.lineno for imp, function in owner.items() if not reasoned(imp, function))


def test_every_import_inside_a_function_gives_its_reason() -> None:
    bare = [
        f"{path.relative_to(ROOT)}:{line}"
        for _, path in package_modules()
        for line in imports_without_reason(path.read_text())
    ]
    assert bare == []


def test_the_reason_check_catches_a_bare_import() -> None:
    source = """
def a():
    import json  # optional: a plain reason on the line
def b():
    # import cost: one reason above two imports in a row
    from rich.table import Table
    from rich.text import Text
def c():
    import csv
def d():
    # a comment that gives no reason
    import csv
# import cost: each name is imported when it is first asked for (PEP 562)
def __getattr__(name):
    if name == "x":
        from x import y
    return y
def e():
    x = 1
    import csv  # a reason must say which: this is not one
"""
    assert imports_without_reason(source) == [9, 12, 20]
    assert imports_without_reason("import csv\nfrom os import path\n") == []  # module level


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
from ujobs_bridge._internal.config import loading
from ujobs_bridge.client import Client
from ujobs_bridge._internal.db import schema
from ujobs_bridge._internal.config.dsn import ResolvedDatabase
from ujobs_bridge._internal.observe.introspect import Introspector
from ujobs_bridge import Worker, WorkerConfig

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
        "from ujobs_bridge._internal.config import loading\n"
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
    cli = (
        "from ujobs_bridge._internal.cli import cli\ncli(sys.argv[1:], prog_name='ujobs-bridge')\n"
    )
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


def test_the_extension_surface_needs_no_optional_dependency_but_the_dashboard() -> None:
    """A worker or a send imports ``ujobs_bridge.ext``; only the dashboard's panels may need the
    ``dashboard`` extra (a fresh ``pip install -e .`` has no Starlette or Jinja2)."""
    probe = (
        "import sys\n"
        "from ujobs_bridge.ext import cli, control, database, jobs, loaders, observe\n"
        "from ujobs_bridge.ext import retention, scheduling, worker\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'starlette', 'jinja2', 'uvicorn', 'celery', 'kombu'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
