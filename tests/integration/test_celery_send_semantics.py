"""Celery's send semantics: every message the app sends runs; only replays are absorbed.

A same-key re-send (the rate-limiting pattern ``self.request.retries -= 1; raise self.retry()``)
and a frozen signature sent twice under one id run as on Celery. A worker that dies after a body
re-sent itself replays that send on redelivery, and the replay is absorbed (one message, not
two); a body that crashes its worker on every run stays ONE row, dead-lettered after
``ujobs_max_deliveries`` claims, never a growing chain. (A message drained twice by ``migrate``
and a beat occurrence sent by both schedulers: ``test_migrate_*`` and
``test_celery_beat_handover``; here the drain replay of one message, end to end.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import migrate_support as ms
import psycopg
import pytest
import redis
from celery import states
from worker_proc import WorkerProc

from apps import celery_sends as s
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    worker,
)
from conftest import wait_for
from ujobs_bridge.testing import redis_url

REDIS_URL = redis_url(2)  # this file's own Redis db (of the test kit's server)


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    s.RAN.clear()
    with bound(s.app, dsn):
        yield s.app


def test_the_same_key_retry_pattern_completes_with_the_retries_it_counted(
    app: Any, dsn: str
) -> None:
    with worker(app, dsn, queues=("sends",)):
        result = s.throttled.delay(3)
        assert result.get(timeout=30) == {"retries": 1, "runs": 5}
        assert result.state == states.SUCCESS
    rows = jobs(dsn, s.throttled.name)
    assert len(rows) == 5  # the first message, its retry, three re-sends under the retry's key
    wait_for(lambda: {r["state"] for r in jobs(dsn)} == {"done"}, what="every row settled")


def test_a_frozen_signature_sent_twice_under_one_id_runs_twice(app: Any, dsn: str) -> None:
    signature = s.add.s(2, 3)
    frozen = signature.freeze()
    first = signature.apply_async()
    again = signature.apply_async()
    assert first.id == again.id == frozen.id
    with worker(app, dsn, queues=("sends",)):
        assert first.get(timeout=30) == 5
        wait_for(lambda: s.RAN["add"] == 2, what="both messages to run")
    assert len(jobs(dsn, s.add.name)) == 2


def test_a_message_drained_twice_is_one_row(app: Any, dsn: str) -> None:
    queue = ms.unique("sends-drain")
    r = redis.Redis.from_url(REDIS_URL)
    try:
        with ms.producer(REDIS_URL, queue) as p:
            sent = p.add.delay(20, 22).id
        (raw,) = r.lrange(queue, 0, -1)
        first = ms.drain(dsn, REDIS_URL, [queue])
        r.lpush(queue, raw)  # the broker hands the same message over again
        second = ms.drain(dsn, REDIS_URL, [queue])
    finally:
        ms.clean_redis(r, queue)
        r.close()
    assert first.outcomes["moved"] == 1 and second.outcomes["duplicate"] == 1
    assert [row["task_id"] for row in ms.rows(dsn)] == [sent]


# -- crashes: a real worker process, SIGKILLed where the test says --------------------------


def run_worker(dsn: str, log: Path, faults: str = "") -> WorkerProc:
    return WorkerProc(dsn, "apps.celery_sends", "sends", log, faults=faults)


def test_a_worker_killed_after_a_re_send_replays_it_into_the_same_key(
    app: Any, dsn: str, tmp_path: Path
) -> None:
    result = s.resend_once.delay()
    dying = run_worker(dsn, tmp_path / "dying.log", faults="celery.after_held_send=kill@1")
    try:
        assert dying.wait(timeout=60) != 0  # killed right after the re-send, before settling
    finally:
        dying.close()
    assert len(jobs(dsn, s.resend_once.name)) == 2
    fresh = run_worker(dsn, tmp_path / "fresh.log")
    try:
        assert result.get(timeout=60)["retries"] == 0
        wait_for(lambda: {r["state"] for r in jobs(dsn)} == {"done"}, timeout=60, what="settled")
    except BaseException:
        print(fresh.output())
        raise
    finally:
        fresh.close()
    # the redelivered first message ran its body again and re-sent: absorbed, one message
    assert len(jobs(dsn, s.resend_once.name)) == 2


def test_a_body_that_kills_its_worker_after_re_sending_itself_stays_one_bounded_row(
    app: Any, dsn: str, tmp_path: Path
) -> None:
    result = s.resend_then_die.delay()
    deadline_runs = 6  # more worker lives than max deliveries (3): the row must stop first
    for life in range(deadline_runs):
        rows = jobs(dsn, s.resend_then_die.name)
        if rows[0]["state"] == "dead":
            break
        proc = run_worker(dsn, tmp_path / f"life{life}.log")
        try:
            wait_for(
                lambda proc=proc: (  # type: ignore[misc]
                    proc.proc.poll() is not None
                    or jobs(dsn, s.resend_then_die.name)[0]["state"] == "dead"
                ),
                timeout=60,
                what="the worker to die or the row to be dead-lettered",
            )
        finally:
            proc.close()
    rows = jobs(dsn, s.resend_then_die.name)
    assert [(r["state"], r["attempt"]) for r in rows] == [("dead", 3)]
    assert result.state == states.FAILURE
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select count(*) from x_celery_tasks").fetchone() == (0,)
