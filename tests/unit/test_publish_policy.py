"""Celery's publish retry policy as the bridge reads it: the merge and the pauses kombu takes.

Why it exists: the outage tests (``tests/slow/test_outages.py``, fault 6) show retries against a
stopped server with Celery's defaults; the arithmetic of other policies is pinned here, without
services: the call's ``retry_policy`` over ``task_publish_retry_policy`` over Celery's defaults,
and kombu's interval range (start, +step, capped at max, the last repeated).
"""

from __future__ import annotations

import itertools

import kombu.exceptions
import psycopg
import pytest

from celery_compat.sending.publish_retry import RetryPolicy, publish


def first(policy: RetryPolicy, n: int) -> list[float]:
    return [round(x, 6) for x in itertools.islice(policy.intervals(), n)]


def test_the_calls_policy_is_merged_over_the_configured_one_over_celerys_defaults() -> None:
    policy = RetryPolicy.of({"max_retries": 5, "interval_step": 0.5}, {"interval_max": 2})
    assert (policy.max_retries, policy.interval_start, policy.interval_step) == (5, 0.0, 0.5)
    assert policy.interval_max == 2.0
    assert RetryPolicy.of(None, {"max_retries": None}).max_retries is None


@pytest.mark.parametrize(
    ("given", "pauses"),
    [
        ({}, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0]),
        ({"interval_start": 1, "interval_step": 1, "interval_max": 3}, [1, 2, 3, 3, 3, 3, 3]),
        ({"interval_start": 5}, [1, 1, 1, 1, 1, 1, 1]),  # clamped to interval_max, as kombu does
        ({"interval_step": 0}, [0, 0, 0, 0, 0, 0, 0]),
    ],
)
def test_pauses_follow_kombus_interval_range(given: dict[str, float], pauses: list[float]) -> None:
    assert first(RetryPolicy.of(None, given), 7) == pauses


def test_an_unreachable_database_is_retried_then_raised_as_kombus_error() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def refused() -> None:
        calls.append(1)
        raise psycopg.OperationalError("connection refused")

    policy = RetryPolicy.of(None, {"max_retries": 2, "interval_start": 1})
    with pytest.raises(kombu.exceptions.OperationalError) as raised:
        publish(
            refused, retry=lambda: True, policy=lambda: policy, what="task t", pause=slept.append
        )
    assert (len(calls), slept) == (3, [1.0, 1.0])
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)


def test_an_error_of_the_statement_is_raised_at_once() -> None:
    calls: list[int] = []

    def bad() -> None:
        calls.append(1)
        raise psycopg.errors.UniqueViolation("duplicate")

    with pytest.raises(psycopg.errors.UniqueViolation):
        publish(bad, retry=lambda: True, policy=RetryPolicy, what="task t", pause=lambda s: None)
    assert calls == [1]
