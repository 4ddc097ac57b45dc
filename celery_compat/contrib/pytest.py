"""pytest fixtures for celery_compat apps, mirroring ``celery.contrib.pytest``.

Why it exists: projects test Celery code with ``celery_app``/``celery_worker`` (one app and one
in-process worker per test) or ``celery_session_app``/``celery_session_worker`` (one of each
for the session). These fixtures have the same names, scopes and override points
(``celery_config``, ``celery_parameters``, ``celery_includes``, ``celery_enable_logging``,
``use_celery_app_trap``, ``celery_worker_pool``, ``celery_worker_parameters``,
``celery_class_tasks``, the ``@pytest.mark.celery(**config)`` marker), but the app is a
``celery_compat.Celery`` and the worker a real bridge worker (``contrib.testing.worker``) on a
Postgres database created for this test session and dropped at its end.

Load it with ``pytest -p celery_compat.contrib.pytest`` or ``pytest_plugins =
["celery_compat.contrib.pytest"]`` in a root ``conftest.py``. It is deliberately NOT registered
as a ``pytest11`` entry point: its fixture names are Celery's, and the two plugins must not both
be active. The database server comes from ``UJOBS_TEST_ADMIN_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``); override the ``celery_ujobs_dsn`` fixture to
use a database of your own (e.g. the one Django's test runner created).

What it is not: isolation between tests. Like Celery's in-memory broker, the session database
is shared by every app the fixtures create; rows left by one test stay (use unique task ids or
``AsyncResult`` of your own calls, as Celery's fixtures require too).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from copy import deepcopy
from typing import Any

import pytest
from celery.contrib.testing.app import DEFAULT_TEST_CONFIG, UnitLogging, setup_default_app

from celery_compat import Celery
from ujobs_bridge import connect
from ujobs_bridge.client import Client
from ujobs_bridge.testing import ADMIN_DSN_ENV, DEFAULT_ADMIN_DSN, TemporaryDatabase

NO_WORKER = os.environ.get("NO_WORKER")
__all__ = ["ADMIN_DSN_ENV", "DEFAULT_ADMIN_DSN", "create_app", "session_database"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "celery(**overrides): override celery configuration for a test case"
    )


# -- the session database ------------------------------------------------------------------------


@contextlib.contextmanager
def session_database(
    admin_dsn: str | None = None, prefix: str = "ujobs_celery_test"
) -> Iterator[str]:
    """Create a private database (name from pid + random), install the schema, drop it after."""
    with TemporaryDatabase(admin_dsn, prefix=prefix) as database:
        yield database.dsn


@pytest.fixture(scope="session")
def celery_ujobs_dsn() -> Iterator[str]:
    """The jobs database of every app these fixtures make: created for the session, then dropped."""
    with session_database() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def celery_ujobs_client(celery_ujobs_dsn: str) -> Iterator[Client]:
    """One connection pool to that database, shared by the session's apps."""
    client = connect(celery_ujobs_dsn, upgrade=False, max_size=8)
    try:
        yield client
    finally:
        client.close()


# -- apps ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def create_app(
    client: Client,
    enable_logging: bool = False,
    use_trap: bool = False,
    parameters: Mapping[str, Any] | None = None,
    **config: Any,
) -> Iterator[Any]:
    """A celery_compat app configured like Celery's ``TestApp``, bound to ``client``'s database."""
    # lazy: importing it registers celery.ping in the apps made from then on
    from celery.contrib.testing import tasks as _ping_tasks

    del _ping_tasks
    params = dict(parameters or {})
    settings = dict(deepcopy(DEFAULT_TEST_CONFIG), **config)
    settings["ujobs_database_url"] = client.dsn
    app = Celery(
        params.pop("main", None) or "celery.tests",
        set_as_current=False,
        log=None if enable_logging else UnitLogging,
        **params,
    )
    app.add_defaults(settings)
    app.use_ujobs_client(client)
    with setup_default_app(app, use_trap=use_trap):
        yield app


def _marked_config(request: pytest.FixtureRequest, config: Mapping[str, Any]) -> dict[str, Any]:
    mark = request.node.get_closest_marker("celery")
    return dict(config, **mark.kwargs if mark else {})


@pytest.fixture(scope="session")
def use_celery_app_trap() -> bool:
    """Override to return True: using the current/default app then raises."""
    return False


@pytest.fixture(scope="session")
def celery_enable_logging() -> bool:
    """Override to return True to let the apps set up logging."""
    return False


@pytest.fixture(scope="session")
def celery_includes() -> Sequence[str]:
    """Override with task modules to import before a worker starts."""
    return ()


@pytest.fixture(scope="session")
def celery_worker_pool() -> str:
    """Celery's pool name; every pool is threads in this process on the bridge."""
    return "solo"


@pytest.fixture(scope="session")
def celery_config() -> Mapping[str, Any]:
    """Override to configure the test apps (``ujobs_database_url`` is set for you)."""
    return {}


@pytest.fixture(scope="session")
def celery_parameters() -> Mapping[str, Any]:
    """Override to pass keyword arguments to ``celery_compat.Celery(...)``."""
    return {}


@pytest.fixture(scope="session")
def celery_worker_parameters() -> Mapping[str, Any]:
    """Override to pass keyword arguments to ``start_worker`` (e.g. ``queues``)."""
    return {}


@pytest.fixture(scope="session")
def celery_class_tasks() -> Sequence[Any]:
    """Override with class-based tasks to register on the app before the worker starts."""
    return []


@pytest.fixture(scope="session")
def celery_session_app(
    request: pytest.FixtureRequest,
    celery_ujobs_client: Client,
    celery_config: Mapping[str, Any],
    celery_parameters: Mapping[str, Any],
    celery_enable_logging: bool,
    use_celery_app_trap: bool,
) -> Iterator[Any]:
    """Session fixture: the app the session worker runs."""
    with create_app(
        celery_ujobs_client,
        enable_logging=celery_enable_logging,
        use_trap=use_celery_app_trap,
        parameters=celery_parameters,
        **_marked_config(request, celery_config),
    ) as app:
        if not use_celery_app_trap:
            app.set_default()
            app.set_current()
        yield app


def _worker(
    app: Any,
    includes: Sequence[str],
    class_tasks: Sequence[Any],
    pool: str,
    parameters: Mapping[str, Any],
) -> Iterator[Any]:
    # import cost: the worker kit loads only for a test that starts a worker
    from celery_compat.contrib.testing.worker import start_worker

    for module in includes:
        app.loader.import_task_module(module)
    for class_task in class_tasks:
        app.register_task(class_task)
    with start_worker(app, pool=pool, **parameters) as worker:
        yield worker


@pytest.fixture(scope="session")
def celery_session_worker(
    celery_session_app: Any,
    celery_includes: Sequence[str],
    celery_class_tasks: Sequence[Any],
    celery_worker_pool: str,
    celery_worker_parameters: Mapping[str, Any],
) -> Iterator[Any]:
    """Session fixture: a bridge worker running the session app's tasks for the whole session."""
    if NO_WORKER:
        yield None
        return
    yield from _worker(
        celery_session_app,
        celery_includes,
        celery_class_tasks,
        celery_worker_pool,
        celery_worker_parameters,
    )


@pytest.fixture
def celery_app(
    request: pytest.FixtureRequest,
    celery_ujobs_client: Client,
    celery_config: Mapping[str, Any],
    celery_parameters: Mapping[str, Any],
    celery_enable_logging: bool,
    use_celery_app_trap: bool,
) -> Iterator[Any]:
    """A fresh app for one test, on the session database."""
    with create_app(
        celery_ujobs_client,
        enable_logging=celery_enable_logging,
        use_trap=use_celery_app_trap,
        parameters=celery_parameters,
        **_marked_config(request, celery_config),
    ) as app:
        yield app


@pytest.fixture
def celery_worker(
    celery_app: Any,
    celery_includes: Sequence[str],
    celery_worker_pool: str,
    celery_worker_parameters: Mapping[str, Any],
) -> Iterator[Any]:
    """A bridge worker for ``celery_app``, started for one test and stopped after it. Tasks the
    test defines after it started run once the test calls ``celery_worker.reload()``, as on
    Celery (new queues included)."""
    if NO_WORKER:
        yield None
        return
    yield from _worker(
        celery_app, celery_includes, (), celery_worker_pool, celery_worker_parameters
    )


@pytest.fixture
def depends_on_current_app(celery_app: Any) -> None:
    """Make ``celery_app`` the current app for the test."""
    celery_app.set_current()
