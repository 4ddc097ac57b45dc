"""Results across both systems during the cutover: a task kept on the old broker
(``ujobs_broker_tasks``) runs on a real Celery worker and stores its result in the app's
``result_backend`` (Redis); ``.get()``/``.state`` on the bridge app read it there, while a task
moved to Postgres runs on a bridge worker beside it and reads from Postgres; a group of both
joins. The application code
is the same for both. Real Celery worker (Celery's own embedded ``start_worker``), real bridge
worker, the test kit's Redis (db 12, this file's)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import celery._state
import pytest
import redis
from celery import group, states
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
    client.flushdb()  # db 12 of the test kit's own redis-server (redis_url), used by this file only
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
        both = group(two.kept_add.s(1, 1), two.moved_add.s(2, 2), two.kept_add.s(3, 3))
        assert both.apply_async().get(timeout=30) == [2, 4, 6]  # a join across both systems

    assert [j["state"] for j in jobs(dsn)] == ["done", "done"]  # only the moved tasks' rows
    assert r.exists(f"celery-task-meta-{kept.id}")  # the Celery worker stored it there
    assert not r.exists(f"celery-task-meta-{moved.id}")  # the bridge never writes to Redis


def test_a_task_handed_a_broker_producer_runs_on_postgres_and_its_sent_event_obeys_the_policy(
    dsn: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's ``test_task_sent_event_respects_publish_retry_limit``: a task not kept on the
    broker goes to Postgres even when handed a producer on the broker (beat schedulers and
    kombu code hand one), and its task-sent event goes out on that producer under
    ``task_publish_retry_policy``: with ``max_retries`` 0 a failed event publish is not retried
    but buffered by the dispatcher."""
    app = two.bridge
    monkeypatch.setitem(app.conf, "task_send_sent_event", True)
    monkeypatch.setitem(app.conf, "task_publish_retry_policy", {"max_retries": 0})
    refused: list[str] = []
    with bound(app, dsn), worker(app, dsn), app.connection_for_write() as connection:
        producer = app.amqp.Producer(connection)
        basic_publish = producer.channel.basic_publish

        def publish(*args: Any, **kwargs: Any) -> Any:
            if kwargs["routing_key"] == "task.sent":
                refused.append(kwargs["routing_key"])
                raise OSError("Broker connection lost")
            return basic_publish(*args, **kwargs)

        monkeypatch.setattr(producer.channel, "basic_publish", publish)
        result = app.send_task(two.moved_add.name, args=(1, 2), producer=producer)
        assert result.get(timeout=30) == 3
    buffered = app.amqp._event_dispatcher._outbound_buffer
    assert refused == ["task.sent"]  # tried once: max_retries 0
    assert [event["uuid"] for event, _ in buffered] == [result.id]
    buffered.clear()
    assert [j["state"] for j in jobs(dsn)] == ["done"]
    assert r.llen("celery") == 0  # nothing was published to the broker's queue
