"""Conformance shim: Celery's integration conftest with the app and the worker on the bridge.

Why it exists: this file becomes ``t/integration/conftest.py`` in the bridge run's tree (Celery's
own conftest is kept beside it as ``celery_conftest.py``). It re-exports everything Celery's
conftest defines (``celery_config`` with the same broker/backend settings, ``celery_includes``,
``celery_class_tasks``, the ``app`` and ``manager`` fixtures, the per-test ``celery_worker``
refusal, the queue check after each test, and the names the test modules import from
``.conftest``) and leaves out only what decides where tasks go:

* ``celery_app``/``celery_session_app``/``celery_session_worker`` come from
  ``celery_compat.contrib.pytest`` (loaded with ``-p``): ``celery_compat.Celery`` apps bound to a
  Postgres database made for this run, and a real bridge worker thread (``start_worker``).

``manager`` is Celery's own fixture, building Celery's own, unmodified
``celery.contrib.testing.manager.Manager``: its ``inspect()`` (``ping``, ``active``,
``query_task`` behind ``assert_accepted``/``assert_received``) and ``wait_until_idle``
(``control.purge`` then ``inspect().active()``) are answered by the bridge worker over Postgres
remote control, as a Celery worker answers over the broker.

The config still says ``result_backend = redis://...``: a celery_compat app ignores it and
stores results in Postgres (that is the one-line cutover), and Celery's tests that gate on
"a Redis result backend" (native chord joins) therefore run here too.

What it is not: a place that changes what a test asserts, or a replacement for any of Celery's
test helpers.
"""

from __future__ import annotations

from t.integration.celery_conftest import (  # noqa: F401  (fixtures and names the tests import)
    RETRYABLE_EXCEPTIONS,
    TEST_BACKEND,
    TEST_BROKER,
    ZZZZ_set_app_current,
    app,
    celery_class_tasks,
    celery_config,
    celery_enable_logging,
    celery_includes,
    celery_worker,
    celery_worker_pool,
    check_for_logs,
    flaky,
    get_active_redis_channels,
    get_redis_connection,
    is_retryable_exception,
    manager,
)
