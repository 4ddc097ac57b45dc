"""Testing idioms Celery users rely on: ``task_always_eager`` (+ ``task_eager_propagates``) runs
inline and returns an EagerResult, eager retries re-run inline, and ``delay``/``apply_async``
stay plain attributes that ``unittest.mock.patch`` can replace. No row is written either way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from celery import states
from celery.exceptions import Retry
from celery.result import EagerResult

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
)


@pytest.fixture
def eager(dsn: str) -> Iterator[Any]:
    t.reset()
    saved = (t.app.conf.task_always_eager, t.app.conf.task_eager_propagates)
    t.app.conf.task_always_eager = True
    try:
        with bound(t.app, dsn):
            yield t.app
    finally:
        t.app.conf.task_always_eager, t.app.conf.task_eager_propagates = saved


def test_eager_delay_runs_inline_and_returns_an_eager_result(eager: Any, dsn: str) -> None:
    r = t.add.delay(2, 3)
    assert isinstance(r, EagerResult)
    assert (r.get(), r.state, r.successful()) == (5, states.SUCCESS, True)
    assert t.RAN["add"] == 1
    assert (t.add.s(1, 1) | t.mul.s(5)).delay().get() == 10
    assert jobs(dsn) == []  # nothing went to the queue


def test_eager_failure_propagates_or_is_held_in_the_result(eager: Any) -> None:
    with pytest.raises(ValueError, match="eager"):
        t.fail.delay("eager")
    eager.conf.task_eager_propagates = False
    r = t.fail.delay("held")
    assert isinstance(r, EagerResult) and r.state == states.FAILURE
    with pytest.raises(ValueError, match="held"):
        r.get()


def test_eager_retry_reruns_inline_until_success_or_the_limit(eager: Any) -> None:
    # Celery's own eager semantics (checked against plain celery.Celery): without propagation a
    # retry re-runs inline, the outer result is the last run's; with it, Retry is raised.
    eager.conf.task_eager_propagates = False
    r = t.manual_retry.delay(succeed_at=2)
    assert (r.state, r.get()) == (states.SUCCESS, "ok after 2")
    assert t.RAN["manual_retry"] == 3
    r = t.autoretry_exact.delay()
    assert r.state == states.FAILURE and repr(r.result) == "Transient('attempt 4')"
    assert t.RAN["autoretry_exact"] == 5  # max_retries=4 from retry_kwargs
    eager.conf.task_eager_propagates = True
    with pytest.raises(Retry):
        t.manual_retry.delay()


def test_eager_request_is_eager_and_custom_headers_are_in_headers(eager: Any) -> None:
    info = t.request_info.apply_async((1,), headers={"x_tenant": "acme"}).get()
    assert (info["is_eager"], info["called_directly"], info["args"]) == (True, False, [1])
    assert info["headers"]["x_tenant"] == "acme" and info["x_tenant_attr"] is None  # as Celery


def test_delay_and_apply_async_can_be_patched(dsn: str) -> None:
    t.reset()
    with bound(t.app, dsn):
        with mock.patch.object(t.add, "delay") as delay:
            t.add.delay(1, 2)
        delay.assert_called_once_with(1, 2)
        with mock.patch("apps.celery_tasks.add.apply_async") as apply_async:
            t.add.apply_async((3, 4), countdown=5)
        apply_async.assert_called_once_with((3, 4), countdown=5)
        assert jobs(dsn) == [] and t.RAN["add"] == 0
        t.add.delay(5, 6)  # unpatched again: a real message
        assert [j["name"] for j in jobs(dsn)] == [t.add.name]
