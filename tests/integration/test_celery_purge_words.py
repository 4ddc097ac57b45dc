"""``celery -A proj purge -f`` (Celery's own command, in this process) removes what Celery's
purge removes and no more: the queued messages, never the ETA/countdown ones, which a Celery
worker already holds (unacked) and which Celery's purge therefore leaves to run."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.bin.celery import celery as celery_command
from click.testing import CliRunner

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
)


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app


def test_purge_leaves_eta_and_countdown_tasks_alone(app: Any, dsn: str) -> None:
    queued = [t.add.delay(1, 1).id, t.add.delay(2, 2).id]
    later = [
        t.add.apply_async((3, 3), countdown=600).id,
        t.add.apply_async((4, 4), eta=datetime.now(UTC) + timedelta(hours=1)).id,
        t.add.apply_async((5, 5), eta=datetime.now(UTC) - timedelta(seconds=1)).id,  # due ETA
    ]
    result = CliRunner().invoke(celery_command, ["-A", "apps.celery_tasks", "purge", "-f"])
    assert result.exit_code == 0, result.output
    assert "Purged 2 messages" in result.output
    states = {row["input"]["headers"]["id"]: row["state"] for row in jobs(dsn, t.add.name)}
    assert [states[i] for i in queued] == ["cancelled", "cancelled"]
    assert [states[i] for i in later] == ["ready", "ready", "ready"]
    assert app.control.purge() == 0  # app.control.purge: the same rule
