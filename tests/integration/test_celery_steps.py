"""Durable steps inside a celery_compat task body: persisted before they return, replayed on a
re-run of the same message instead of running the side effect again.

Why it exists: the docs promise (docs/how-to/steps.md) that a Celery task can use ``step.run``/``step.sleep``; a task
that suspends (``step.sleep``) leaves its worker slot and, when it wakes, is re-run from the top
with its completed steps replayed. This pins that on a real worker and real Postgres.

What it is not: the step engine's own tests (``test_steps.py``, ``test_step_faults.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import states

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    worker,
)
from ujobs_bridge import step

CHARGES: list[int] = []


@t.app.task(name="tests.celery_steps.checkout")
def checkout(order_id: int) -> dict[str, Any]:
    def charge() -> str:
        CHARGES.append(order_id)
        return f"charge-{order_id}-{len(CHARGES)}"

    receipt = step.run("charge", charge)
    step.sleep("settle", 0.05)  # suspends: the row sleeps, the slot is freed, then a re-run
    return {"receipt": receipt, "charges": len(CHARGES)}


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    CHARGES.clear()
    with bound(t.app, dsn):
        yield t.app


def test_a_task_that_sleeps_between_steps_charges_once_and_returns_the_stored_receipt(
    app: Any, dsn: str
) -> None:
    with worker(app, dsn):
        r = checkout.delay(42)
        assert r.get(timeout=15) == {"receipt": "charge-42-1", "charges": 1}
    assert r.state == states.SUCCESS
    assert CHARGES == [42]  # the re-run after the sleep replayed the step, it did not charge again
    (row,) = jobs(dsn, checkout.name)
    assert row["state"] == "done"
