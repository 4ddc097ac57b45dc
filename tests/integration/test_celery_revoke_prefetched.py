"""``revoke()`` without ``terminate`` as Celery's worker honours it: a message the bridge worker
already claimed (its prefetch) but whose body has not started never runs and reads REVOKED,
while a started body finishes. Revoked ids reach the worker by NOTIFY and are loaded when its
listener connects, so a row re-claimed after a worker died is not run either.

Also ``Reject(requeue=True)`` as Celery's integration test pins it: the message comes back and
reads ``delivery_info['redelivered'] == True``, so a task that rejects only a first delivery
ends SUCCESS."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from celery import signals, states
from celery.exceptions import TaskRevokedError

from apps import celery_revoke_tasks as rt
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
    receivers,
    worker,
)
from celery_compat.worker.revoked_ids import REVOKED, RevokedIds
from conftest import wait_for
from ujobs_bridge._internal.db import leases as leases_db


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    rt.reset()
    with bound(rt.app, dsn):
        yield rt.app
    rt.GATE.set()  # never leave a body blocked


class Revoked:
    """Collects ``task_revoked`` (sent on a worker thread)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, sender: Any = None, **kwargs: Any) -> None:
        self.calls.append(kwargs)

    def of(self, task_id: str) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["request"].id == task_id]


def state_of(dsn: str, name: str) -> str:
    (row,) = jobs(dsn, name)
    return str(row["state"])


def test_a_claimed_message_revoked_before_its_body_starts_never_runs(app: Any, dsn: str) -> None:
    revoked = Revoked()
    with receivers((signals.task_revoked, revoked)), worker(app, dsn, concurrency=1) as w:
        assert w.listener.listening.wait(10)
        first = rt.hold.delay("first")
        assert rt.STARTED.wait(10)  # the only body slot is busy
        second = rt.mark.delay("second")
        wait_for(
            lambda: state_of(dsn, rt.mark.name) == "running", what="the second message claimed"
        )
        second.revoke()  # no terminate
        wait_for(lambda: second.id in REVOKED, what="the revoke to reach the worker")
        rt.GATE.set()
        assert first.get(timeout=10) == "first"
        # REVOKED is stored by the worker: the revoke itself left the claimed one PENDING
        with pytest.raises(TaskRevokedError):
            second.get(timeout=10)
        wait_for(lambda: state_of(dsn, rt.mark.name) == "cancelled", what="the row cancelled")
    assert rt.RAN["second"] == 0
    assert second.state == states.REVOKED
    (call,) = revoked.of(second.id)
    assert (call["terminated"], call["expired"]) == (False, False)
    assert revoked.of(first.id) == []


def test_a_started_task_revoked_without_terminate_finishes(app: Any, dsn: str) -> None:
    revoked = Revoked()
    with receivers((signals.task_revoked, revoked)), worker(app, dsn, concurrency=1) as w:
        assert w.listener.listening.wait(10)
        r = rt.hold.delay("started")
        assert rt.STARTED.wait(10)
        r.revoke()
        wait_for(lambda: r.id in REVOKED, what="the revoke to reach the worker")
        rt.GATE.set()
        assert r.get(timeout=10) == "started"
    assert r.state == states.SUCCESS
    assert rt.RAN["started:finished"] == 1
    assert revoked.calls == []


def test_a_revoked_row_rescued_after_its_worker_died_is_not_run_by_a_fresh_worker(
    app: Any, dsn: str
) -> None:
    r = rt.mark.delay("rescued")
    with psycopg.connect(dsn, autocommit=True) as conn:  # a worker claims it and dies at once
        (_claimed,) = leases_db.job_claim(
            conn,
            leases_db.ClaimParams(
                queue="celery",
                names=[rt.mark.name],
                limit=1,
                token=uuid.uuid4(),
                lease_s=0,
                worker="died",
                now=None,
            ),
        )
    r.revoke()  # the row is running: left as it is, and no listener of this process heard it
    assert state_of(dsn, rt.mark.name) == "running" and r.id not in REVOKED
    revoked = Revoked()
    with receivers((signals.task_revoked, revoked)), worker(app, dsn, start=False) as w:
        w.listener.start()
        assert w.listener.listening.wait(10)
        assert r.id in REVOKED  # loaded when the listener connected
        assert w.tick() == 1  # rescue, claim, and drop it before its body
    assert rt.RAN["rescued"] == 0
    assert state_of(dsn, rt.mark.name) == "cancelled"
    assert r.state == states.REVOKED
    (call,) = revoked.of(r.id)
    assert (call["terminated"], call["expired"]) == (False, False)


def test_a_revoke_sent_while_the_listener_was_cut_off_is_loaded_when_it_reconnects(
    app: Any, dsn: str
) -> None:
    with worker(app, dsn, concurrency=1, start=False) as w:
        w.listener.reconnect_s = 60.0  # it reconnects when the test restarts it, not before
        w.listener.start()
        assert w.listener.listening.wait(10) and REVOKED.live
        with psycopg.connect(dsn, autocommit=True) as admin:  # the server drops its connection
            admin.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity"
                " where datname = current_database() and application_name = %s",
                (w.listener.application_name,),
            )
        wait_for(lambda: not w.listener.listening.is_set(), what="the listener to notice the cut")
        r = rt.mark.apply_async(("missed",), countdown=3600)
        r.revoke()  # its NOTIFY reaches nobody in this process
        assert not REVOKED.live and r.id not in REVOKED
        assert REVOKED.is_revoked(app, r.id)  # meanwhile the table answers
        w.listener.stop()
        w.listener.start()
        assert w.listener.listening.wait(10)
        assert REVOKED.live and r.id in REVOKED


def test_the_set_forgets_ids_older_than_its_window() -> None:
    now = [1000.0]
    ids = RevokedIds(window_s=60, clock=lambda: now[0])
    ids.add([("old", 50.0), ("young", 0.0)])
    assert "old" in ids and "young" in ids
    now[0] += 30
    ids.add([("later", 0.0)])
    assert "old" not in ids and "young" in ids and "later" in ids and len(ids) == 2


def test_reject_with_requeue_is_redelivered_flagged_and_succeeds(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        r = rt.requeue_until_redelivered.delay()
        assert r.get(timeout=10) == "redelivered"
    assert rt.DELIVERIES == [False, True]
    assert r.state == states.SUCCESS
    assert [j["state"] for j in jobs(dsn)] == ["done"]
