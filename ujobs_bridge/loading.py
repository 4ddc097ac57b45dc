"""Find the jobs a worker may run: import the module named by ``-A`` and collect its jobs.

Why it exists: the worker must know every job it claims by name, and it must never import code by
a name taken from a database row. So the code comes from the operator's ``-A MODULE[:ATTR]`` only,
like Celery's: a module holding ``app``/``celery``, a ``module:attr``, or a plain module whose
``ujobs_bridge.job`` objects are collected. Two jobs under one name are refused.

What it is not: global state. Declaring a job registers nothing; this scan is the registry.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from .errors import ConfigError, ErrorCode
from .job import JobDefinition

Registry = Mapping[str, JobDefinition[Any, Any]]


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


def load_target(spec: str) -> Any:
    """Import ``MODULE`` or ``MODULE:ATTR`` as Celery's ``-A`` does; errors name the fix."""
    module_name, _, attr = spec.partition(":")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # like `celery -A`, resolve modules from the working directory
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"-A {spec!r}: module {module_name!r} could not be imported ({exc})",
            code=ErrorCode.APP_NOT_FOUND,
            hint="run from the directory that holds the module, or set PYTHONPATH",
        ) from exc
    if not attr:
        return module
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
    from .purge import purge

    return [purge]


def is_celery_app(target: Any) -> bool:
    """A Celery app (celery_compat's or plain Celery's), recognised without importing Celery."""
    celery = sys.modules.get("celery")
    return celery is not None and isinstance(target, celery.Celery)


def celery_app_of(target: Any) -> Any | None:
    """The Celery app ``-A`` names: the target itself, or a module's ``app``/``celery``."""
    if is_celery_app(target):
        return target
    if isinstance(target, ModuleType):
        for attr in ("app", "celery"):
            candidate = getattr(target, attr, None)
            if is_celery_app(candidate):
                return candidate
    return None


def load(spec: str, *, with_builtin: bool = True) -> dict[str, JobDefinition[Any, Any]]:
    """The jobs of ``-A spec``, plus the built-in ones unless asked not to."""
    target = load_target(spec)
    app = celery_app_of(target)
    if app is not None:
        from celery_compat.execution import jobs_for_app

        found = build(jobs_for_app(app))
    elif isinstance(target, ModuleType):
        found = from_module(target)
    elif isinstance(target, JobDefinition):
        found = build([target])
    elif isinstance(target, Iterable):
        found = build(t for t in target if isinstance(t, JobDefinition))
    else:
        found = {}
    if not found:
        raise ConfigError(
            f"-A {spec!r} holds no ujobs_bridge jobs",
            code=ErrorCode.APP_NOT_FOUND,
            hint="decorate functions with @ujobs_bridge.job in that module, or point -A at the module that has them",
        )
    if with_builtin:
        found = build([*found.values(), *builtin()])
    return found


def app_database_url(spec: str) -> str | None:
    """``ujobs_database_url`` from the Celery app ``-A`` names, if it is one and sets it."""
    app = celery_app_of(load_target(spec))
    if app is None:
        return None
    value = app.conf.get("ujobs_database_url")
    return str(value) if value else None


def celery_worker_settings(spec: str) -> dict[str, int]:
    """The worker settings a Celery app ``-A`` names has set: ``worker_concurrency`` (→
    ``concurrency``) and ``worker_prefetch_multiplier`` (→ ``prefetch_multiplier``), each only
    when the app sets it (Celery's own defaults, CPU count and 4, do not override the bridge's)."""
    app = celery_app_of(load_target(spec))
    if app is None:
        return {}
    conf = app.conf
    builtin = conf.maps[-1] if getattr(conf, "maps", None) else {}
    out: dict[str, int] = {}
    for key, name in (
        ("worker_concurrency", "concurrency"),
        ("worker_prefetch_multiplier", "prefetch_multiplier"),
    ):
        value = conf.get(key)
        explicit = key in conf.maps[0] if getattr(conf, "maps", None) else False
        if value is None or (not explicit and value == builtin.get(key)):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"the Celery app's {key}={value!r} is not a positive integer",
                hint=f"set {key} to a whole number of at least 1, or pass the worker flag",
            )
        out[name] = value
    return out


def bind_database(spec: str, dsn: str) -> None:
    """Point a celery_compat app's results and sends at the database the worker runs on (and,
    through the environment, the app in any child process of ``--pool processes``)."""
    app = celery_app_of(load_target(spec))
    if app is None or not hasattr(app, "use_ujobs_client"):
        return
    from .client import Client
    from .dsn import ENV_DATABASE_URL, ResolvedDatabase

    os.environ[ENV_DATABASE_URL] = dsn
    app.use_ujobs_client(Client(ResolvedDatabase(dsn, "flag", ""), max_size=8))
