"""Signals and ``self.request`` as Celery code reads them, on a real bridge worker.

Publish signals get the protocol-v2 shapes handlers unpack (paperless-ngx does
``_, task_kwargs, _ = body`` and reads ``headers["id"]``/``headers["task"]`` and custom headers);
run signals get Celery's keyword arguments; a bound task sees the request a Celery worker builds.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import group, signals, states
from celery.exceptions import TaskRevokedError, TimeLimitExceeded

from apps import celery_tasks as t
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    receivers,
    worker,
)
from conftest import wait_for


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app
    t.GATE.set()


class Recorder:
    """Collects every call of one signal (receivers run in worker threads)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, sender: Any = None, **kwargs: Any) -> None:
        self.calls.append({"sender": sender, **kwargs})

    def of(self, task_id: str) -> list[dict[str, Any]]:
        def tid(call: dict[str, Any]) -> Any:
            if "task_id" in call:
                return call["task_id"]
            if "request" in call:
                return call["request"].id
            return call.get("headers", {}).get("id")

        return [c for c in self.calls if tid(c) == task_id]


def test_publish_signals_get_the_protocol_v2_shapes(app: Any, dsn: str) -> None:
    before, after = Recorder(), Recorder()
    with receivers((signals.before_task_publish, before), (signals.after_task_publish, after)):
        r = t.add.apply_async((2, 3), {}, headers={"trigger_source": "web"}, countdown=60)
        s = t.add.s(1, 2).set(headers={"trigger_source": "signature"}).delay()
    (call,) = before.of(r.id)
    body, headers = call["body"], call["headers"]
    assert isinstance(body, tuple) and len(body) == 3
    args, kwargs, embed = body  # the unpacking real handlers do
    assert (list(args), kwargs) == ([2, 3], {})
    assert set(embed) == {"callbacks", "errbacks", "chain", "chord"}
    assert call["sender"] == "apps.celery_tasks.add" == headers["task"]
    assert headers["id"] == r.id and headers["root_id"] == r.id and headers["parent_id"] is None
    assert headers["trigger_source"] == "web" and headers["retries"] == 0
    assert headers["eta"] is not None and headers["lang"] == "py"
    assert call["routing_key"] == "celery" and call["exchange"] == ""
    assert call["properties"]["correlation_id"] == r.id
    assert isinstance(call["retry_policy"], dict) and "declare" in call
    (done,) = after.of(r.id)
    assert (
        done["sender"] == headers["task"]
        and done["body"] == body
        and done["routing_key"] == "celery"
    )
    assert before.of(s.id)[0]["headers"]["trigger_source"] == "signature"


def test_run_signals_for_success_get_celerys_arguments(app: Any, dsn: str) -> None:
    pre, post, ok = Recorder(), Recorder(), Recorder()
    with (
        receivers(
            (signals.task_prerun, pre), (signals.task_postrun, post), (signals.task_success, ok)
        ),
        worker(app, dsn),
    ):
        r = t.add.delay(2, 3)
        assert r.get(timeout=10) == 5
        wait_for(lambda: post.of(r.id), what="postrun")
    (p,) = pre.of(r.id)
    assert (
        p["sender"] is p["task"] is app.tasks[t.add.name]
        and list(p["args"]) == [2, 3]
        and p["kwargs"] == {}
    )
    (q,) = post.of(r.id)
    assert (q["retval"], q["state"], list(q["args"])) == (5, states.SUCCESS, [2, 3])
    (s,) = [c for c in ok.calls if c["sender"] is app.tasks[t.add.name]]
    assert s["result"] == 5 and "runtime" in s


def test_failure_and_retry_signals_get_celerys_arguments(app: Any, dsn: str) -> None:
    failed, retried = Recorder(), Recorder()
    with receivers((signals.task_failure, failed), (signals.task_retry, retried)), worker(app, dsn):
        r = t.fail.delay("broken")
        with pytest.raises(ValueError):
            r.get(timeout=10)
        wait_for(lambda: failed.of(r.id), what="task_failure")
        m = t.manual_retry.delay()
        wait_for(lambda: retried.of(m.id), what="task_retry")
        m.revoke()  # the retry waits 7 s; not needed here
    (f,) = failed.of(r.id)
    assert f["sender"] is app.tasks[t.fail.name] and isinstance(f["exception"], ValueError)
    assert list(f["args"]) == ["broken"] and f["kwargs"] == {}
    assert f["traceback"] is not None and "ValueError: broken" in f["einfo"].traceback
    rt = retried.of(m.id)[0]
    assert rt["sender"] is app.tasks[t.manual_retry.name] and rt["request"].retries == 0
    assert "try 0" in str(rt["reason"]) and rt["einfo"] is not None


def test_revoked_signal_for_terminate_and_for_expiry(app: Any, dsn: str) -> None:
    revoked, failed = Recorder(), Recorder()
    with (
        receivers((signals.task_revoked, revoked), (signals.task_failure, failed)),
        worker(app, dsn),
    ):
        running = t.blocks.delay()
        assert t.STARTED.wait(10)
        running.revoke(terminate=True)
        expired = t.add.apply_async((1, 1), expires=datetime.now(UTC) - timedelta(seconds=1))
        for r in (running, expired):
            with pytest.raises(TaskRevokedError):
                r.get(timeout=10)
        wait_for(lambda: revoked.of(running.id) and revoked.of(expired.id), what="task_revoked")
    (term,) = revoked.of(running.id)
    assert (term["terminated"], term["expired"], term["signum"]) == (True, False, 15)
    assert term["sender"] is app.tasks[t.blocks.name] and term["request"].id == running.id
    (exp,) = revoked.of(expired.id)
    assert (exp["terminated"], exp["expired"]) == (False, True)
    assert failed.of(running.id) == []  # Celery kills a terminated child: no task_failure


def test_hard_time_limit_fires_task_failure_and_the_errback(app: Any, dsn: str) -> None:
    failed = Recorder()
    with receivers((signals.task_failure, failed)), worker(app, dsn):
        r = t.hard_limited.apply_async(link_error=t.on_error.s())
        with pytest.raises(TimeLimitExceeded):
            r.get(timeout=10)
        wait_for(lambda: failed.of(r.id) and t.ERRBACKS, what="task_failure and the errback")
    (f,) = failed.of(r.id)
    assert isinstance(f["exception"], TimeLimitExceeded) and f["einfo"] is not None
    assert [(e["id"], e["exc_type"]) for e in t.ERRBACKS] == [(r.id, "TimeLimitExceeded")]
    assert t.RAN["hard_limited_finished"] == 0


def test_self_request_holds_what_a_celery_worker_puts_there(app: Any, dsn: str) -> None:
    expires = datetime.now(UTC) + timedelta(hours=1)
    eta = datetime.now(UTC) - timedelta(seconds=1)  # due at once: no waiting
    with worker(app, dsn):
        r = t.request_info.apply_async(
            (1, "two"),
            {"k": "v"},
            headers={"x_tenant": "acme"},
            expires=expires,
            eta=eta,
            priority=5,
        )
        info = r.get(timeout=10)
        child = t.spawn_child.delay()
        child_info = t.app.AsyncResult(child.get(timeout=10)).get(timeout=10)
    assert info["id"] == r.id and info["args"] == [1, "two"] and info["kwargs"] == {"k": "v"}
    assert info["retries"] == 0 and info["group"] is None
    assert info["eta"] == eta.isoformat() and info["expires"] == expires.isoformat()
    assert info["delivery_info"] == {
        "exchange": "",
        "routing_key": "celery",
        "priority": 5,
        "redelivered": False,
    }
    assert "@" in info["hostname"]
    assert (info["root_id"], info["parent_id"]) == (r.id, None)
    assert (info["called_directly"], info["is_eager"]) == (False, False)
    assert info["x_tenant_attr"] == "acme" and info["headers"]["x_tenant"] == "acme"
    # a task sent from inside a task carries the lineage
    assert (child_info["root_id"], child_info["parent_id"]) == (child.id, child.id)
    assert child_info["delivery_info"]["priority"] == 0  # sent with none: 0, as on Celery


def test_group_members_see_their_group_id(app: Any, dsn: str) -> None:
    with worker(app, dsn):
        g = group(t.request_info.s(i) for i in range(3)).apply_async()
        infos = g.get(timeout=10)
    assert [i["group"] for i in infos] == [g.id] * 3
    assert [i["args"] for i in infos] == [[0], [1], [2]]


def test_called_directly_is_true_outside_a_worker(app: Any) -> None:
    info = t.request_info(1)
    assert info["called_directly"] is True and info["id"] is None
