"""A Celery group's send on the bridge: its messages are written together (a commit per chunk,
not a commit per message, which made a group of 1,000 wait out 1,000 flushes), every row is
durable when ``apply_async`` returns, a generator that takes its time still has its first
members written while it yields (celery #3021), and a group one of whose members cannot be
encoded leaves nothing to run. Inside the caller's transaction (``enqueue_in``) a group rides
that transaction as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from celery import group
from kombu.exceptions import EncodeError

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    worker,
)
from celery_compat import enqueue_in
from celery_compat.sending import group_sends
from conftest import wait_for


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app


def written(dsn: str) -> tuple[int, int]:
    """(rows, distinct transactions that wrote them), read before any worker touched them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select count(*), count(distinct xmin::text) from x_jobs").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.fixture
def no_time_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits only per chunk and at the end: on a loaded machine building a group can take
    longer than the 0.1 s bound, which would split it (that bound has a test of its own)."""
    monkeypatch.setattr(group_sends, "MAX_HOLD_S", 600.0)


def test_a_group_is_written_in_one_commit_and_runs(app: Any, dsn: str, no_time_bound: None) -> None:
    result = group(t.identity.s(i) for i in range(40)).apply_async()
    assert written(dsn) == (40, 1)  # all there when apply_async returned, in one transaction
    with worker(app, dsn, concurrency=4):
        assert result.get(timeout=30) == list(range(40))


def test_a_large_group_commits_once_per_chunk(
    app: Any, dsn: str, monkeypatch: pytest.MonkeyPatch, no_time_bound: None
) -> None:
    monkeypatch.setattr(group_sends, "CHUNK", 10)
    result = group(t.identity.s(i) for i in range(25)).apply_async()
    assert written(dsn) == (25, 3)
    with worker(app, dsn, concurrency=4):
        assert result.get(timeout=30) == list(range(25))


def test_a_group_with_a_member_that_cannot_be_encoded_sends_nothing(
    app: Any, dsn: str, no_time_bound: None
) -> None:
    with pytest.raises(EncodeError):
        group(t.identity.s(1), t.identity.s(object()), t.identity.s(3)).apply_async()
    assert written(dsn) == (0, 0)
    assert t.identity.delay(7).id  # the app sends as before afterwards
    assert written(dsn) == (1, 1)


def test_a_group_inside_the_callers_transaction_rolls_back_with_it(app: Any, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        with enqueue_in(conn):
            group(t.identity.s(i) for i in range(5)).apply_async()
        assert written(dsn) == (0, 0)  # not committed yet
        conn.rollback()
    assert written(dsn) == (0, 0)


def test_a_slow_generator_has_its_first_members_written_while_it_still_yields(
    app: Any, dsn: str
) -> None:
    def members() -> Iterator[Any]:
        yield t.identity.s(0)
        yield t.identity.s(1)  # Celery looks one member ahead: member 0 is sent after this
        # No result read here: only the hold's time bound can write the first member.
        wait_for(lambda: written(dsn)[0] == 1, timeout=10, what="the first member's row")
        yield t.identity.s(2)

    result = group(members()).apply_async()
    assert written(dsn) == (3, 2)
    with worker(app, dsn, concurrency=2):
        assert result.get(timeout=30) == [0, 1, 2]


def test_a_commit_the_timer_could_not_make_is_made_at_the_end_or_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The time bound's write meets an outage: its messages are written again when the send
    ends; if that fails too, the send raises. Nothing is dropped silently."""
    monkeypatch.setattr(group_sends, "MAX_HOLD_S", 0.01)
    attempts: list[list[str]] = []
    failing = {"left": 1}

    def write(held: list[Any]) -> None:
        attempts.append([h[0] for h in held])
        if failing["left"]:
            failing["left"] -= 1
            raise psycopg.OperationalError("the server closed the connection")

    with group_sends.gathered(write):
        assert group_sends.hold("m1", "{}", 3)
        wait_for(lambda: attempts == [["m1"]], timeout=10, what="the timer's failed write")
    assert attempts == [["m1"], ["m1"]]  # written again at the end

    attempts.clear()
    failing["left"] = 2
    with pytest.raises(psycopg.OperationalError), group_sends.gathered(write):
        assert group_sends.hold("m2", "{}", 3)
        wait_for(lambda: len(attempts) == 1, timeout=10, what="the timer's failed write")
    assert attempts == [["m2"], ["m2"]]
