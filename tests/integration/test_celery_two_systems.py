"""Results across both systems during the cutover: a task kept on the old broker
(``ujobs_broker_tasks``) runs on a real Celery worker and stores its result in the app's
``result_backend`` (Redis); ``.get()``/``.state`` on the bridge app read it there, while a task
moved to Postgres runs on a bridge worker beside it and reads from Postgres. The application code
is the same for both. Real Celery worker (Celery's own embedded ``start_worker``), real bridge
worker, the test kit's Redis (db 12, this file's)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import celery._state
import pytest
import redis
from celery import states
from celery.contrib.testing.worker import start_worker
from celery.result import AsyncResult

from apps import celery_two_systems as two
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    worker,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(two.REDIS_URL)
    client.flushdb()  # db 12 belongs to this file
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def celery_worker(r: redis.Redis) -> Iterator[Any]:
    """A real Celery worker (threads in this process) on the Redis broker; Celery's current and
    default app are given back afterwards (``start_worker`` makes its app both)."""
    current, default = celery._state.get_current_app(), celery._state.default_app
    try:
        with start_worker(two.plain, perform_ping_check=False, shutdown_timeout=30) as w:
            yield w
    finally:
        celery._state._set_current_app(current)
        celery._state.default_app = default


def test_results_of_tasks_kept_on_the_old_broker_are_read_from_its_result_backend(
    dsn: str, r: redis.Redis, celery_worker: Any
) -> None:
    with bound(two.bridge, dsn), worker(two.bridge, dsn):
        kept = two.kept_add.delay(2, 3)  # to Redis: the Celery worker runs it
        moved = two.moved_add.delay(1, 1)  # to Postgres: the bridge worker runs it
        failing = two.kept_fail.delay("on celery")
        assert kept.get(timeout=30) == 5
        assert moved.get(timeout=30) == 2
        with pytest.raises(ValueError, match="on celery"):
            failing.get(timeout=30)

        later = AsyncResult(kept.id, app=two.bridge)  # another process asking by id alone
        assert (later.state, later.result) == (states.SUCCESS, 5)
        assert AsyncResult(failing.id, app=two.bridge).state == states.FAILURE
        assert AsyncResult("never-sent", app=two.bridge).state == states.PENDING

    assert [j["state"] for j in jobs(dsn)] == ["done"]  # only the moved task was a job row
    assert r.exists(f"celery-task-meta-{kept.id}")  # the Celery worker stored it there
    assert not r.exists(f"celery-task-meta-{moved.id}")  # the bridge never writes to Redis
