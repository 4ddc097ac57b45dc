"""Find the jobs a worker may run: import what ``-A`` names and ask a ``Loader`` what it holds.

Why it exists: the worker must know every job it claims by name, and it must never import code by
a name taken from a database row. So the code comes from the operator's ``-A MODULE[:ATTR]`` only,
like Celery's. What the target holds is read by a ``Loader``: the engine's own (a module, a
``JobDefinition`` or a list of them, whose ``ujobs_bridge.job`` objects and ``task()``s are
collected) or one a package above the engine contributes through the ``ujobs_bridge.loaders``
entry-point group (``celery_compat`` reads a Celery app that way). The first loader, in name
order, that ``claims`` the target answers; the engine's own answers otherwise. What it answers is
a ``LoadedApp``: the jobs, the periodic tasks, the database URL and worker settings the app
declares, extra LISTEN channels for the worker, and ``bind(dsn)`` to point the app at the
worker's database. Two jobs under one name are refused.

What it is not: global state. Declaring a job registers nothing; this scan is the registry, and
the engine imports no package above it (the loaders come from installed metadata).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import sys
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ujobs_bridge._internal.config import plugins
from ujobs_bridge._internal.jobs.purge import purge
from ujobs_bridge._internal.scheduling.task import tasks_from_module
from ujobs_bridge._internal.worker.config import DEFAULT_NODE_PREFIX
from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.job import JobDefinition

if TYPE_CHECKING:
    from ujobs_bridge._internal.scheduling.scheduler import TaskSource
    from ujobs_bridge._internal.scheduling.task import PeriodicTask
    from ujobs_bridge._internal.worker.control import CommandSet, Panel
    from ujobs_bridge._internal.worker.listener import ExtraChannel

Registry = Mapping[str, JobDefinition[Any, Any]]


class Mailbox(Protocol):
    """The worker's mailbox (``presence.Presence``): the command panel it dispatches to."""

    @property
    def panel(self) -> Panel: ...


class RunningWorker(Protocol):
    """The worker as an app's lifecycle hooks see it (``Worker`` is one). Declared here, below
    the worker: a ``--pool processes`` child loads its app through this module."""

    @property
    def dsn(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def presence(self) -> Mailbox: ...


def build(jobs: Iterable[JobDefinition[Any, Any]]) -> dict[str, JobDefinition[Any, Any]]:
    out: dict[str, JobDefinition[Any, Any]] = {}
    for definition in jobs:
        other = out.get(definition.name)
        if other is not None and other is not definition:
            raise ConfigError(
                f"two jobs are named {definition.name!r}",
                code=ErrorCode.JOB_DUPLICATE,
                hint="give one of them another name=... in its @job(...)",
            )
        out[definition.name] = definition
    return out


def from_module(module: ModuleType) -> dict[str, JobDefinition[Any, Any]]:
    return build(v for v in vars(module).values() if isinstance(v, JobDefinition))


def _import(spec: str, name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"-A {spec!r}: module {name!r} could not be imported ({exc})",
            code=ErrorCode.APP_NOT_FOUND,
            hint="run from the directory that holds the module, or set PYTHONPATH",
        ) from exc


def load_target(spec: str) -> Any:
    """Import what ``-A spec`` names, by Celery's rules (``symbol_by_name`` in ``find_app``):
    ``MODULE:ATTR[.ATTR]``; ``PKG.MODULE.ATTR`` (the last part an attribute of the module before
    it, else the whole name a module); ``MODULE``. Errors name the fix."""
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # like `celery -A`, resolve modules from the working directory
    module_name, colon, attr = spec.partition(":")
    if not colon:
        head, dot, tail = spec.rpartition(".")
        if dot and head:
            try:
                module = importlib.import_module(head)
            except ImportError:
                module = None
            if module is not None and hasattr(module, tail):
                return getattr(module, tail)
        return _import(spec, spec)
    module = _import(spec, module_name)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(
                f"-A {spec!r}: {module_name} has no attribute {attr!r}",
                code=ErrorCode.APP_NOT_FOUND,
                hint="name an attribute that exists, e.g. -A proj.tasks:app",
            )
        target = getattr(target, part)
    return target


def builtin() -> list[JobDefinition[Any, Any]]:
    """Jobs every worker can run: the retention sweep."""
    return [purge]


class LoadedApp:
    """What ``-A`` named, as the engine uses it. This base reads a plain target: a module's
    ``JobDefinition``s and ``task()``s, a ``JobDefinition``, or an iterable of them; it declares
    no database, no worker settings and no channels, and has nothing to bind. A loader for
    another kind of app returns a subclass."""

    def __init__(self, spec: str, target: Any) -> None:
        self.spec = spec
        self.target = target
        self.default_timeout_s: float | None = None  # the worker's --time-limit, see jobs_of

    def apply_time_limits(self, hard_s: float | None, soft_s: float | None) -> None:
        """The worker's ``--time-limit`` / ``--soft-time-limit``: defaults for the jobs that
        declare none, applied before the jobs are read (in the worker and in each pool child).
        Here, for ``@job`` functions, the hard limit is the ``timeout=`` of every job declared
        without one; a soft limit is refused: an ``@job`` body has one deadline, its timeout
        (it sees ``current_job().signal`` aborted there), and no soft-limit exception."""
        if soft_s is not None:
            raise ConfigError(
                f"--soft-time-limit: -A {self.spec} is not a Celery app, and the soft time "
                "limit raises Celery's SoftTimeLimitExceeded in a Celery task's body",
                hint="drop --soft-time-limit; an @job body watches current_job().signal, "
                "aborted at its timeout= (or --time-limit)",
            )
        self.default_timeout_s = hard_s

    def jobs(self) -> list[JobDefinition[Any, Any]]:
        target = self.target
        if isinstance(target, ModuleType):
            return list(from_module(target).values())
        if isinstance(target, JobDefinition):
            return [target]
        if isinstance(target, Iterable):
            return [t for t in target if isinstance(t, JobDefinition)]
        return []

    def periodic_tasks(self) -> dict[str, PeriodicTask]:
        """What ``scheduler -A`` fires and ``tasks ls -A`` shows."""
        if not isinstance(self.target, ModuleType):
            raise ConfigError(
                f"-A {self.spec!r} is not a module",
                code=ErrorCode.APP_NOT_FOUND,
                hint="point -A at the module that declares the task()s",
            )
        return tasks_from_module(self.target)

    def task_source(self) -> TaskSource | None:
        """Periodic tasks the app keeps in tables (read by the scheduler every round), if any."""
        return None

    def database_url(self) -> str | None:
        """The database the app itself names (below ``--dsn``, above the environment)."""
        return None

    def worker_settings(self) -> dict[str, int]:
        """``concurrency`` / ``prefetch_multiplier`` the app sets, used where no flag is given."""
        return {}

    def worker_pool(self) -> str | None:
        """The pool the app chose, by Celery's ``-P`` name, used where no ``-P`` is given."""
        return None

    def unregistered_dead_after_s(self) -> float | None:
        """How long a due job whose name no live worker consuming its queue declares waits
        before it is dead-lettered (``UJ_TASK_UNREGISTERED``); None: it waits for such a worker.
        The engine's own apps wait; a Celery app fails it, as Celery's worker does."""
        return None

    def channels(self) -> tuple[ExtraChannel, ...]:
        """Extra LISTEN channels the worker's listener should carry for this app."""
        return ()

    def bind(self, dsn: str) -> None:
        """Point the app's own sends and results at the worker's database ``dsn``."""

    def sends_events(self) -> bool:
        """Does the app send monitoring events when the worker is given ``-E`` (Celery's task
        events)? The engine's own apps do not, so ``-E`` is refused for them."""
        return False

    def control_commands(self) -> tuple[CommandSet, ...]:
        """Remote-control command sets the app adds to the engine's commands
        (``ujobs_bridge._internal.worker.control``), each under its own prefix, for a tool that
        speaks the app's own words."""
        return ()

    def node_prefix(self) -> str:
        """The name part of the worker's node name when ``-n`` gives none (``<prefix>@<host>``):
        the engine's ``ujobs``; an app's loader may name its workers as its own tools expect."""
        return DEFAULT_NODE_PREFIX

    def apply_task_settings(self, settings: Mapping[str, Mapping[str, Any]]) -> None:
        """In a ``--pool processes`` child: task settings remote control changed in the parent
        (task name -> attribute -> value; all of them, each time they change)."""

    def control_encode(self, value: Any) -> str:
        """A command's reply as JSON text (the app's own JSON, when it has one)."""
        return json.dumps(value, default=str)

    # -- the worker's lifecycle, for apps that announce it (Celery's worker signals) --------------
    # ``ujobs-bridge worker`` calls these in the main process: ``on_worker_init`` once the worker
    # is built and before it starts (``options``: the command's flags, the DSN left out),
    # ``on_worker_ready`` once it claims, ``on_worker_stopping`` as a stop signal arrives (before
    # acting on it; again, with ``hurry``, on the second), ``on_worker_shutdown`` after it stopped. A
    # ``--pool processes`` child calls ``on_process_init`` after loading and binding the app, and
    # ``on_process_shutdown`` once as it exits. The engine's own apps announce nothing.

    def on_worker_init(self, worker: RunningWorker, options: Mapping[str, Any]) -> None:
        """The worker is built and about to start (main process)."""

    def on_worker_ready(self, worker: RunningWorker) -> None:
        """The worker has started claiming (main process)."""

    def on_worker_stopping(self, worker: RunningWorker, signum: int, hurry: bool) -> None:
        """Signal ``signum`` asks the worker to stop: ``hurry`` False, running bodies may finish;
        True (a second signal), they are handed back at once (main process, signal handler)."""

    def on_worker_shutdown(self, worker: RunningWorker) -> None:
        """The worker has stopped (main process)."""

    def on_process_init(self) -> None:
        """A ``--pool processes`` child has loaded the app and is about to run bodies."""

    def on_process_shutdown(self) -> None:
        """A ``--pool processes`` child is exiting."""


@runtime_checkable
class Loader(Protocol):
    """How ``-A`` reads one kind of app (an entry of the ``ujobs_bridge.loaders`` group)."""

    def claims(self, target: Any) -> bool:
        """Is ``target`` (or, for a module, what it holds) an app of this loader's kind? It may
        import the target package's own submodule named after the framework (the operator's
        code, named by ``-A``), nothing named by data.

        A loader may also define ``searched(spec, target) -> list[str]``: what it looked for,
        listed by the error when nothing claims a target that holds no jobs (``not_found``)."""
        ...

    def load(self, target: Any, spec: str) -> LoadedApp: ...


def _framework_submodule(target: Any, name: str) -> bool:
    """Does package ``target`` have a submodule ``name`` (``proj/celery.py`` for the ``celery``
    entry)? Celery's ``-A proj`` looks there, so a package whose ``__init__`` does not import its
    app must still reach the framework's loader. Reads the package's path; imports nothing."""
    if not isinstance(target, ModuleType) or not getattr(target, "__path__", None):
        return False
    try:
        return importlib.util.find_spec(f"{target.__name__}.{name}") is not None
    except (ImportError, ValueError):
        return False


def loader_for(target: Any) -> Loader | None:
    """The first contributed loader, in name order, that claims ``target``. A loader entry is
    named after the top-level module whose apps it reads (``celery``) and is consulted only when
    that module has been imported (by the target, or anything before it), or when ``target`` is a
    package with a submodule of that name (Celery's ``proj/celery.py``; the loader may import
    it): an app cannot be an instance of a framework nobody imported, and a plain ``@job`` module
    does not pay for importing the loader's package (for celery_compat: Celery itself)."""
    for entry in plugins.entries(plugins.LOADER_GROUP):
        if entry.name not in sys.modules and not _framework_submodule(target, entry.name):
            continue
        loader = plugins.load_one(plugins.LOADER_GROUP, entry)
        if loader is not None and loader.claims(target):
            return loader  # type: ignore[no-any-return]
    return None


def searched(spec: str, target: Any) -> list[str]:
    """What ``-A spec`` was searched for, for an error: the engine's own reading, then each
    contributed loader's (its optional ``searched(spec, target)``). Only on the error path, so
    loading every loader (and its framework) here costs nothing in the common case."""
    name = target.__name__ if isinstance(target, ModuleType) else spec
    out = [f"@ujobs_bridge.job functions and task()s in {name}"]
    for _, loader in plugins.load_all(plugins.LOADER_GROUP):
        describe = getattr(loader, "searched", None)
        if describe is not None:
            out.extend(describe(spec, target))
    return out


def not_found(spec: str, target: Any, what: str) -> ConfigError:
    """``-A spec`` holds nothing a command can use; the message lists everything tried."""
    tried = "".join(f"\n  - {item}" for item in searched(spec, target))
    return ConfigError(
        f"-A {spec!r} holds no {what}; looked for:{tried}",
        code=ErrorCode.APP_NOT_FOUND,
        hint="point -A at the module that declares them, or name the app: -A proj.celery:app",
    )


def resolve(spec: str) -> LoadedApp:
    """Import what ``-A spec`` names and read it with the loader that claims it."""
    target = load_target(spec)
    loader = loader_for(target)
    if loader is None:
        return LoadedApp(spec, target)
    return loader.load(target, spec)


def jobs_of(app: LoadedApp, *, with_builtin: bool = True) -> dict[str, JobDefinition[Any, Any]]:
    """The jobs of ``app``, plus the built-in ones unless asked not to; none is an error."""
    found = build(app.jobs())
    if not found:
        raise not_found(app.spec, app.target, "jobs")
    if app.default_timeout_s is not None:
        found = {name: _with_timeout(d, app.default_timeout_s) for name, d in found.items()}
    if with_builtin:
        found = build([*found.values(), *builtin()])
    return found


def _with_timeout(definition: JobDefinition[Any, Any], timeout_s: float) -> JobDefinition[Any, Any]:
    """``definition`` with ``timeout_s`` when it declares no timeout of its own (a copy: the
    module's object is left as declared)."""
    if definition.timeout_s is not None:
        return definition
    timed = copy.copy(definition)
    timed.timeout_s = timeout_s
    return timed


def load(spec: str, *, with_builtin: bool = True) -> dict[str, JobDefinition[Any, Any]]:
    """The jobs of ``-A spec``, plus the built-in ones unless asked not to."""
    return jobs_of(resolve(spec), with_builtin=with_builtin)
