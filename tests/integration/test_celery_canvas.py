"""Celery's canvas executed durably by a bridge worker: chains pass results as the first argument,
``.si`` is immutable, groups and chains nest, chords get header results in order and route a
failed header to the body's errback as ChordError, chunks/xmap/xstarmap, GroupResult persistence,
link and link_error callbacks; a header task growing its chord (``add_to_chord``) and a header
given as a generator, sent as it is consumed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import chain, chord, group
from celery.exceptions import ChordError
from celery.result import AsyncResult, GroupResult

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    worker,
)
from conftest import wait_for

ADDED: list[tuple[str, int]] = []  # (task id, value) of each part grow() added


@t.app.task(bind=True, name="canvas.grow")
def grow(self: Any, nums: list[int], val: int) -> int:
    """A header task adding one ``add(num, val)`` part per number to its own chord."""
    for num in nums:
        added = self.add_to_chord(t.add.s(num, val))
        ADDED.append((added.id, num + val))
    return 0


@t.app.task(bind=True, name="canvas.grow_chord")
def grow_chord(self: Any, nums: list[int], val: int) -> int:
    """A header task adding a whole chord (its body's result joins) to its own chord."""
    self.add_to_chord(group(t.add.s(num, val) for num in nums) | t.tsum.s())
    return 0


@pytest.fixture
def run(dsn: str) -> Iterator[Any]:
    """The app bound to the test database with a worker thread running its tasks."""
    t.reset()
    ADDED.clear()
    with bound(t.app, dsn), worker(t.app, dsn, concurrency=8) as w:
        yield w


def test_chain_passes_each_result_as_the_first_argument(run: Any) -> None:
    r = (t.add.s(2, 2) | t.mul.s(4) | t.add.s(1)).apply_async()
    assert r.get(timeout=10) == 17  # ((2+2)*4)+1
    assert r.parent.get(timeout=10) == 16 and r.parent.parent.get(timeout=10) == 4
    assert chain(t.add.s(10, 1), t.add.s(-100)).delay().get(timeout=10) == -89


def test_si_is_immutable_in_a_chain(run: Any) -> None:
    r = (t.add.s(1, 1) | t.add.si(10, 10) | t.mul.s(2)).apply_async()
    assert r.get(timeout=10) == 40


def test_chains_inside_a_group_and_a_group_inside_a_chain(run: Any) -> None:
    g = group(chain(t.add.s(1, 1), t.mul.s(10)), chain(t.add.s(2, 2), t.mul.s(10)))
    assert g.apply_async().get(timeout=10) == [20, 40]
    nested = chain(t.add.s(1, 1), group(t.mul.s(2), t.mul.s(3)), t.tsum.s())  # group|task → chord
    assert nested.apply_async().get(timeout=10) == 10  # 2*2 + 2*3
    plain = chain(t.add.s(1, 1), group(t.mul.s(2), t.mul.s(3)))
    assert plain.apply_async().get(timeout=10) == [4, 6]


def test_chord_body_gets_header_results_in_header_order(run: Any) -> None:
    r = chord(t.add.s(i, i) for i in range(6))(t.identity.s())
    assert r.get(timeout=10) == [0, 2, 4, 6, 8, 10]
    assert chord([t.add.s(1, 2), t.add.s(3, 4)])(t.tsum.s()).get(timeout=10) == 10
    assert t.RAN["tsum"] == 1


def test_a_failing_chord_header_skips_the_body_and_runs_its_errback(run: Any) -> None:
    body = t.tsum.s()
    body.link_error(t.on_error.s())
    header = [t.add.s(1, 1), t.fail.s("header broke")]
    r = chord(header)(body)
    # as in Celery, get() raises the header's own error if it sees it first, else ChordError
    with pytest.raises((ValueError, ChordError), match="header broke"):
        r.get(timeout=10)
    wait_for(lambda: t.ERRBACKS, what="the body's errback")
    body_result = t.app.AsyncResult(r.id)  # Celery calls the errback, then stores FAILURE
    wait_for(lambda: body_result.state == "FAILURE", what="the body's FAILURE")
    assert isinstance(body_result.result, ChordError)
    failed_id = r.parent.results[1].id  # Celery's words name the part that failed
    assert str(body_result.result).startswith(f"Dependency {failed_id} raised ValueError(")
    assert t.RAN["tsum"] == 0
    assert [(e["id"], e["exc_type"]) for e in t.ERRBACKS] == [(r.id, "ChordError")]
    assert "header broke" in t.ERRBACKS[0]["exc"]


def test_chunks_xmap_and_xstarmap(run: Any) -> None:
    chunked = t.add.chunks(zip(range(6), range(6), strict=True), 2).apply_async()
    assert chunked.get(timeout=10) == [[0, 2], [4, 6], [8, 10]]
    assert t.tsum.map([[1, 2], [3, 4, 5]]).apply_async().get(timeout=10) == [3, 12]
    assert t.add.starmap([(1, 2), (3, 4)]).apply_async().get(timeout=10) == [3, 7]


def test_group_result_save_restore_join_and_completed_count(run: Any) -> None:
    g = group(t.add.s(i, i) for i in range(4)).apply_async()
    g.save()
    restored = GroupResult.restore(g.id, app=t.app)
    assert restored is not None and [c.id for c in restored.children] == [c.id for c in g.children]
    assert restored.join(timeout=10) == [0, 2, 4, 6]
    assert (restored.completed_count(), restored.ready(), restored.successful()) == (4, True, True)
    restored.delete()
    assert GroupResult.restore(g.id, app=t.app) is None


def test_link_and_link_error_callbacks(run: Any) -> None:
    r = t.add.apply_async((1, 1), link=t.mul.s(10))
    assert r.get(timeout=10) == 2
    wait_for(lambda: r.children, what="the callback recorded as a child")
    assert r.children[0].get(timeout=10) == 20
    bad = t.fail.apply_async(("linked",), link=t.mul.s(10), link_error=t.on_error.s())
    old = t.fail.apply_async(("old style",), link_error=t.on_error_old.s())
    wait_for(lambda: len(t.ERRBACKS) == 2, what="both errbacks")
    by_id = {e["id"]: e for e in t.ERRBACKS}
    assert by_id[bad.id] == {"id": bad.id, "exc_type": "ValueError", "exc": "linked"}
    assert by_id[old.id] == {"id": old.id, "exc_type": None, "exc": None}  # called with the task id
    assert t.RAN["mul"] == 1  # the success callback did not run for the failure


def test_add_to_chord_grows_the_running_chord_and_the_body_gets_the_added_parts(run: Any) -> None:
    r = chord([t.add.s(1, 1), grow.s([10, 20], 1), t.add.s(2, 2)])(t.identity.s())
    result = r.get(timeout=10)
    assert sorted(result) == [0, 2, 4, 11, 21] and t.RAN["add"] == 4
    # Celery's Redis backend order: by group index (an added part takes its adder's), then id.
    adder = r.parent.results[1].id
    middle = [value for _, value in sorted([(adder, 0), *ADDED])]
    assert result == [2, *middle, 4]
    nested = chord([grow_chord.s([1, 2, 3], 4)])(t.identity.s())
    assert sorted(nested.get(timeout=10)) == [0, 5 + 6 + 7]


def test_a_generator_header_is_sent_as_it_is_consumed_and_the_body_runs_once(
    run: Any, dsn: str
) -> None:
    first = t.add.s(0, 0)
    first_id = first.freeze().id

    def header() -> Iterator[Any]:
        yield first
        for i in range(1, 4):
            if i == 3:  # celery #3021: the first part ran before the header was spent
                wait_for(
                    lambda: AsyncResult(first_id, app=t.app).ready(),
                    timeout=10,
                    what="a header part to run",
                )
            yield t.add.s(i, i)

    r = chord(header())(t.tsum.s())
    assert r.get(timeout=10) == 12
    assert [c.get(timeout=10) for c in r.parent.results] == [0, 2, 4, 6]
    assert t.RAN["tsum"] == 1 and len(jobs(dsn, t.tsum.name)) == 1
    ordered = chord(t.add.s(i, i) for i in range(6))(t.identity.s())
    assert ordered.get(timeout=10) == [0, 2, 4, 6, 8, 10]
