"""``Reject(requeue=True)`` as Celery's integration test pins it: the message comes back and
reads ``delivery_info['redelivered'] == True``, so a task that rejects only a first delivery
ends SUCCESS (run by a real bridge worker on Postgres)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import states

from apps import celery_revoke_tasks as rt
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    worker,
)


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    rt.reset()
    with bound(rt.app, dsn):
        yield rt.app
    rt.GATE.set()


def test_reject_with_requeue_is_redelivered_flagged_and_succeeds(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = rt.requeue_until_redelivered.delay()
        assert r.get(timeout=10) == "redelivered"
    assert rt.DELIVERIES == [False, True]
    assert r.state == states.SUCCESS
    assert [j["state"] for j in jobs(dsn)] == ["done"]
