"""How ``ujobs-bridge ... -A proj`` reads a Celery app: the engine's ``Loader`` for Celery apps.

Why it exists: the engine resolves ``-A`` through loaders found by entry point
(``ujobs_bridge.loaders``; ``ujobs_bridge/loading.py``) and imports nothing of Celery. This is
the loader for a Celery app (celery_compat's or plain Celery's), named by ``-A`` as Celery names
it, by the rules of Celery's ``find_app`` (``app_of``): the app itself (``proj.celery:app``), a
module's ``app``/``celery``, a package's ``celery`` submodule (``-A proj`` in the Django guide's
layout), any attribute that is a Celery app. It answers with
what the worker and the scheduler need from the app: one job per task
(``execution.jobs_for_app``), its beat entries as periodic tasks plus any native ``task()`` of
the same module (``beat.scheduler_tasks``), ``ujobs_database_url``, the worker settings the app
sets explicitly, the revoked-ids LISTEN channel (``revoked_ids.py``), and ``bind(dsn)`` that
gives the app a bridge client on the worker's database (a plain ``celery.Celery`` app is adopted
first, ``adoption.py``, so what its tasks send goes to Postgres, not to its broker), and the
remote-control commands answered with the app (Celery's, as the engine's command set ``celery``:
``control/worker_commands.py``), and Celery's node name ``celery@<host>`` when ``-n`` names none.

What it is not: the execution of a task (``execution.py``) or the beat conversion (``beat.py``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from celery_compat.worker import settings as worker_settings
from ujobs_bridge.client import Client
from ujobs_bridge.ext.database import ResolvedDatabase
from ujobs_bridge.ext.loaders import LoadedApp

if TYPE_CHECKING:  # types only: a command that just reads the app (migrate) imports no worker
    from celery_compat.control.broker import BrokerControl
    from celery_compat.events.worker_events import WorkerEvents
    from celery_compat.worker.signals import WorkerInstance
    from ujobs_bridge.ext.jobs import JobDefinition
    from ujobs_bridge.ext.loaders import RunningWorker
    from ujobs_bridge.ext.scheduling import PeriodicTask, TaskSource
    from ujobs_bridge.ext.worker import ExtraChannel


def is_celery_app(target: Any) -> bool:
    """A Celery app (celery_compat's or plain Celery's). No app exists unless Celery was
    imported by the target, so this never imports Celery itself."""
    celery = sys.modules.get("celery")
    return celery is not None and isinstance(target, celery.Celery)


def _submodule(module: ModuleType) -> ModuleType | None:
    """``<module>.celery`` imported, if the package has one (Celery's ``proj/celery.py``);
    ``None`` when it has none. An error inside that module is the operator's to see."""
    if not getattr(module, "__path__", None):
        return None
    name = f"{module.__name__}.celery"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


def app_of(target: Any) -> Any | None:
    """The Celery app ``-A`` names, found as Celery's ``find_app`` finds it: the target itself;
    for a module, its attribute ``app``, else ``celery`` (each skipped when it is a module), else
    (a package) the same search in its ``celery`` submodule, else any attribute that is a Celery
    app. A non-app ``app``/``celery`` attribute is passed over (Celery would fail on it)."""
    if is_celery_app(target):
        return target
    if not isinstance(target, ModuleType):
        return None
    for attr in ("app", "celery"):
        candidate = getattr(target, attr, None)
        if is_celery_app(candidate):
            return candidate
    sub = _submodule(target)
    if sub is not None:
        found = app_of(sub)
        if found is not None:
            return found
    for candidate in list(vars(target).values()):
        if is_celery_app(candidate):
            return candidate
    return None


def searched(spec: str, target: Any) -> list[str]:
    """Where ``app_of`` looked, in its order, for an error message."""
    if not isinstance(target, ModuleType):
        return [f"a Celery app as {spec} itself (it is a {type(target).__name__})"]
    name = target.__name__
    out = [f"a Celery app as {name}.app, then {name}.celery"]
    if getattr(target, "__path__", None):
        out.append(f"the submodule {name}.celery (its app, celery, or any Celery app in it)")
    out.append(f"any attribute of {name} that is a Celery app")
    return out


def not_found(spec: str, target: Any) -> str:
    """The error for ``-A spec`` naming no Celery app, listing where ``app_of`` looked."""
    tried = "".join(f"\n  - {item}" for item in searched(spec, target))
    return (
        f"-A {spec!r} holds no Celery app; looked for:{tried}\n"
        "hint: point -A at the module that creates the app, or name it: -A proj.celery:app"
    )


class CeleryApp(LoadedApp):
    """A Celery app named by ``-A``, as the engine uses it."""

    def __init__(self, spec: str, target: Any, app: Any) -> None:
        super().__init__(spec, target)
        self.app = app
        self._worker: WorkerInstance | None = None
        self._events: WorkerEvents | None = None
        self._broker_control: BrokerControl | None = None
        self._dsn: str | None = None

    def jobs(self) -> list[JobDefinition[Any, Any]]:
        # import cost: the tracer and task events load in a worker, not to read an app
        from celery_compat.worker.execution import jobs_for_app

        return jobs_for_app(self.app)

    def periodic_tasks(self) -> dict[str, PeriodicTask]:
        # import cost: beat's entries load for the scheduler only
        from celery_compat.beat.entries import scheduler_tasks

        return scheduler_tasks(self.target, self.app)

    def task_source(self) -> TaskSource | None:
        """django-celery-beat's tables, when the app's ``beat_scheduler`` names its scheduler."""
        # import cost: read for the scheduler only
        from celery_compat.beat.django_beat import source_for

        return source_for(self.app)

    def database_url(self) -> str | None:
        value = self.app.conf.get("ujobs_database_url")
        return str(value) if value else None

    def worker_settings(self) -> dict[str, int]:
        """Its sizes; first, what it sets that the bridge cannot honour is refused and what
        has no effect here is said (``worker_settings.review``)."""
        worker_settings.review(self.app)
        return worker_settings.sizes(self.app)

    def worker_pool(self) -> str | None:
        return worker_settings.pool(self.app)

    def unregistered_dead_after_s(self) -> float | None:
        return worker_settings.UNKNOWN_TASK_FAILS_AFTER_S

    def apply_time_limits(self, hard_s: float | None, soft_s: float | None) -> None:
        """Celery's meaning: ``task_time_limit`` / ``task_soft_time_limit``, the defaults for
        tasks that set none (enforced in the body's process, ``interrupts.py``)."""
        if hard_s is not None:
            self.app.conf.task_time_limit = hard_s
        if soft_s is not None:
            self.app.conf.task_soft_time_limit = soft_s

    def channels(self) -> tuple[ExtraChannel, ...]:
        # import cost: the revocations' channel loads in a worker only
        from celery_compat.worker import revoked_ids

        return (revoked_ids.channel(),)

    def sends_events(self) -> bool:
        return True

    def bind(self, dsn: str) -> None:
        self._dsn = dsn  # where this process's events go
        # import cost: adoption loads when a worker binds the app
        from celery_compat import adoption

        if adoption.adopt(self.app):  # plain Celery: sends and results move to Postgres too
            adoption.announce(self.app, self.spec)
        self.app.use_ujobs_client(Client(ResolvedDatabase(dsn, "flag", ""), max_size=8))

    def control_commands(self) -> tuple[Any, ...]:
        # import cost: Celery's remote control loads in a worker only
        from celery_compat.control import worker_commands as worker_control

        return (worker_control.command_set(self.app),)

    def node_prefix(self) -> str:
        """Celery's default node name is ``celery@<host>``, as Celery's operators expect."""
        # import cost: the control package's __init__ stays out of commands that never ask
        from celery_compat.control.names import NODE_PREFIX

        return NODE_PREFIX

    def apply_task_settings(self, settings: Mapping[str, Mapping[str, Any]]) -> None:
        # import cost: Celery's remote control loads in a worker only
        from celery_compat.control import worker_commands as worker_control

        worker_control.apply_settings(self.app, settings)

    def control_encode(self, value: Any) -> str:
        # import cost: Celery's remote control loads in a worker only
        from celery_compat.control import worker_commands as worker_control

        return worker_control.encode(value)

    # Celery's worker signals, at the worker's moments (worker_signals.py has the order), and
    # Celery's events under -E (worker_events.py), for the node name the signals use.
    def on_worker_init(self, worker: RunningWorker, options: Mapping[str, Any]) -> None:
        # import cost: Celery's events and signals load in a worker (this module imports no Celery)
        from celery_compat.events import worker_events

        # import cost: Celery's control replies load in a worker only
        from celery_compat.worker import mingle
        from celery_compat.worker import signals as worker_signals

        self._worker = worker_signals.worker_init(self.app, worker, options)
        mingle.warn_if_name_taken(self._dsn or worker.dsn, worker.node, options)
        self._events = worker_events.start(
            self.app, worker, options, self._worker.hostname, self._dsn or worker.dsn
        )  # never raises: a worker whose events cannot start runs without them

    def on_worker_ready(self, worker: RunningWorker) -> None:
        # import cost: Celery's signals load in a worker only (this module imports no Celery)
        from celery_compat.worker import signals as worker_signals

        if self._worker is not None:
            worker_signals.worker_ready(self._worker)
        if self._events is not None:
            self._events.ready()
        # import cost: the broker mailbox and remote control load once the worker is ready
        from celery_compat.control import broker as broker_control
        from celery_compat.control import worker_commands as worker_control

        self._broker_control = broker_control.start(  # never raises
            self.app, worker.node, worker.presence.panel, worker_control.encode
        )

    def on_worker_stopping(self, worker: RunningWorker, signum: int, hurry: bool) -> None:
        # import cost: Celery's signals load in a worker only (this module imports no Celery)
        from celery_compat.worker import signals as worker_signals

        if self._broker_control is not None:  # no further command (safe in a signal handler)
            self._broker_control.request_stop()
        if self._worker is not None:
            worker_signals.worker_shutting_down(self._worker, signum, hurry)

    def on_worker_shutdown(self, worker: RunningWorker) -> None:
        # import cost: Celery's signals load in a worker only (this module imports no Celery)
        from celery_compat.worker import signals as worker_signals

        if self._broker_control is not None:  # never waits long on a broker that hangs
            self._broker_control.close()
            self._broker_control = None
        if self._events is not None:
            self._events.shutdown()
        if self._worker is not None:
            worker_signals.worker_shutdown(self._worker)

    def on_process_init(self) -> None:
        # import cost: Celery's events and signals load in a worker (this module imports no Celery)
        from celery_compat.events import worker_events
        from celery_compat.worker import signals as worker_signals

        worker_signals.process_init(self.app)
        worker_events.child_start(self.app, worker_signals.child_hostname(), self._dsn)

    def on_process_shutdown(self) -> None:
        # import cost: Celery's events and signals load in a worker (this module imports no Celery)
        from celery_compat.events import worker_events
        from celery_compat.worker import signals as worker_signals

        worker_signals.process_shutdown()
        worker_events.child_stop(self.app)


class CeleryLoader:
    """The ``ujobs_bridge.loaders`` entry ``celery``."""

    def claims(self, target: Any) -> bool:
        return app_of(target) is not None

    def searched(self, spec: str, target: Any) -> list[str]:
        return searched(spec, target)

    def load(self, target: Any, spec: str) -> LoadedApp:
        app = app_of(target)
        assert app is not None
        return CeleryApp(spec, target, app)


LOADER = CeleryLoader()
