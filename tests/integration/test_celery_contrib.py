"""Testing helpers a Celery user reaches for, on the bridge: ``start_worker`` runs a real bridge
worker in-process (the app's queues, signals, waits for in-flight work on exit), the
``celery_compat.contrib.pytest`` fixtures give a working app and worker on a database of their
own (dropped after the session), and ``DjangoTask.delay_on_commit`` sends only after a commit.

The fixture and Django tests run pytest in a subprocess (``pytester``): the plugin is loaded
there with ``-p`` exactly as a user would, and Django's settings stay out of this process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from celery import chain, group, states
from celery.contrib.testing.worker import test_worker_started, test_worker_stopped
from celery.signals import task_received
from celery.worker import state as worker_state
from celery.worker.request import Request

from celery_compat import Celery
from celery_compat.contrib.testing.worker import start_worker
from conftest import ADMIN_DSN, wait_for
from ujobs_bridge import connect

pytest_plugins = ["pytester"]

STARTED = threading.Event()
GATE = threading.Event()


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    app = Celery("contrib_app")
    app.conf.update(task_routes={"contrib.mul": {"queue": "math"}})

    @app.task(name="contrib.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="contrib.mul", shared=False)
    def mul(x: int, y: int) -> int:
        return x * y

    @app.task(name="contrib.held", shared=False)
    def held() -> str:
        STARTED.set()
        assert GATE.wait(10)
        return "released"

    STARTED.clear()
    GATE.clear()
    client = connect(dsn, upgrade=False)
    app.use_ujobs_client(client)
    try:
        yield app
    finally:
        GATE.set()
        app.close()
        app.use_ujobs_client(None)
        client.close()


def job_states(dsn: str, name: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select state from x_jobs where name = %s order by created_at", (name,))
        return [r[0] for r in rows.fetchall()]


def test_start_worker_runs_the_apps_tasks_on_its_queues_until_the_block_ends(
    app: Any, dsn: str
) -> None:
    seen: list[tuple[str, Any]] = []

    def started(sender: Any, worker: Any, **_: Any) -> None:
        seen.append(("started", worker))

    def stopped(sender: Any, worker: Any, **_: Any) -> None:
        seen.append(("stopped", worker))

    test_worker_started.connect(started, weak=False)
    test_worker_stopped.connect(stopped, weak=False)
    try:
        with start_worker(app) as w:  # the ping round trip has run by now
            assert set(w.queues) == {"celery", "math"}  # default queue + the routed one
            assert app.tasks["contrib.add"].delay(2, 3).get(timeout=10) == 5
            assert app.tasks["contrib.mul"].delay(2, 3).get(timeout=10) == 6  # task_routes → math
            assert app.tasks["contrib.add"].apply_async((1, 1), queue="math").get(timeout=10) == 2
    finally:
        test_worker_started.disconnect(started)
        test_worker_stopped.disconnect(stopped)
    assert job_states(dsn, "contrib.mul") == ["done"]
    assert [kind for kind, _ in seen] == ["started", "stopped"]
    assert seen[0][1] is seen[1][1] is w
    late = app.tasks["contrib.add"].delay(5, 5)  # no worker any more: it waits, durably
    assert late.state == states.PENDING
    assert job_states(dsn, "contrib.add") == ["done", "done", "ready"]  # 2 run, 1 waiting
    assert job_states(dsn, "celery.ping") == ["done"]


def test_leaving_start_worker_waits_for_the_task_in_flight(app: Any, dsn: str) -> None:
    with start_worker(app, perform_ping_check=False) as w:
        r = app.tasks["contrib.held"].delay()
        assert STARTED.wait(10)

        def release_once_stopping() -> None:
            while not w.worker.stopping:
                threading.Event().wait(0.01)
            GATE.set()

        threading.Thread(target=release_once_stopping, daemon=True).start()
    assert r.state == states.SUCCESS and r.result == "released"
    assert job_states(dsn, "contrib.held") == ["done"]


def test_the_test_worker_keeps_celery_worker_state_and_sends_task_received(app: Any) -> None:
    received: list[Any] = []

    def on_received(sender: Any = None, request: Any = None, **_: Any) -> None:
        received.append(request)

    task_received.connect(on_received, weak=False)
    try:
        with start_worker(app, perform_ping_check=False):
            r = app.tasks["contrib.add"].apply_async((2, 2), headers={"tenant": "t1"})
            assert r.get(timeout=10) == 4
    finally:
        task_received.disconnect(on_received)
    assert r.id in worker_state.successful_requests  # what Celery's integration tests poll
    (request,) = [q for q in received if q.id == r.id]
    assert isinstance(request, Request)  # Celery's own Request, as on a Celery worker
    assert request.name == "contrib.add" and request.replaced_task_nesting == 0


def test_a_chord_whose_header_ends_in_a_group_waits_for_that_group(app: Any) -> None:
    """The header's size counts the nested group's tasks (set_chord_size); counting header
    entries instead joined early and, with one worker thread, waited for itself forever."""
    add = app.tasks["contrib.add"]
    flow = chain(
        add.si(1, 0),
        group(add.si(1, 100), chain(add.si(1, 200), group(add.si(1, 1000), add.si(1, 2000)))),
        add.si(1, 10),
    )
    with start_worker(app, concurrency=1, perform_ping_check=False):
        assert flow.apply_async().get(timeout=20) == 11


def test_revoke_marks_an_unstarted_id_revoked_and_replies_like_a_worker(app: Any) -> None:
    backend = app.backend
    started, not_started = "started-elsewhere", "never-sent"
    backend.store_result(started, {"hostname": "other@host"}, states.STARTED)
    assert app.control.revoke("unheard", reply=True, timeout=0.5) == []  # no worker runs
    with start_worker(app, perform_ping_check=False, hostname="rev@test"):
        reply = app.control.revoke([started, not_started], reply=True, timeout=5)
    assert reply is not None and [next(iter(r)) for r in reply] == ["rev@test"]
    assert "flagged as revoked" in reply[0]["rev@test"]["ok"]
    assert backend.get_state(started) == states.STARTED  # another worker owns that state
    assert backend.get_state(not_started) == states.REVOKED
    assert app.control.revoke("another") is None  # no reply asked, none given


def test_reload_runs_tasks_defined_after_the_worker_started_on_their_new_queue(app: Any) -> None:
    with start_worker(app, perform_ping_check=False) as w:

        @app.task(name="contrib.late", queue="late", shared=False)
        def late(x: int) -> int:
            return 10 * x

        sent = late.delay(4)  # waits in Postgres: nobody consumes "late" yet
        assert "late" not in w.queues and sent.state == states.PENDING
        w.reload()  # what Celery's testing docs say to call
        assert set(w.queues) == {"celery", "math", "late"}
        assert sent.get(timeout=10) == 40
        assert late.delay(5).get(timeout=10) == 50


def test_reload_keeps_the_queues_start_worker_was_given(app: Any) -> None:
    with start_worker(app, perform_ping_check=False, queues="celery") as w:

        @app.task(name="contrib.late2", queue="late2", shared=False)
        def late2() -> str:
            return "late"

        w.reload()
        assert w.queues == ("celery",)
        assert "contrib.late2" in w.worker.names
        assert late2.apply_async(queue="celery").get(timeout=10) == "late"


FIXTURE_TESTS = """
import psycopg
import pytest
from celery import shared_task

import celery_compat


@shared_task(name="fx.mul")
def mul(x, y):
    return x * y


@pytest.fixture(scope="session")
def celery_config():
    return {"task_default_queue": "work"}


def test_function_app_and_worker(celery_app, celery_worker, celery_ujobs_dsn):
    assert isinstance(celery_app, celery_compat.Celery)
    assert celery_app.conf.ujobs_database_url == celery_ujobs_dsn
    assert celery_worker.queues == ("work",)
    assert mul.delay(4, 5).get(timeout=10) == 20
    with open("dbname.txt", "w") as f:
        f.write(psycopg.conninfo.conninfo_to_dict(celery_ujobs_dsn)["dbname"])


def test_session_app_and_worker(celery_session_app, celery_session_worker):
    assert celery_session_worker.app is celery_session_app
    assert mul.delay(6, 7).get(timeout=10) == 42


def test_function_worker_reload_picks_up_a_task_defined_in_the_test(celery_app, celery_worker):
    @celery_app.task(name="fx.late", queue="late")
    def late(x):
        return -x

    celery_worker.reload()
    assert "late" in celery_worker.queues
    assert late.delay(3).get(timeout=10) == -3


@pytest.mark.celery(result_expires=60)
def test_marker_overrides_config(celery_app):
    assert celery_app.conf.result_expires == 60
"""


def test_pytest_fixtures_give_an_app_and_a_worker_on_a_session_database(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_fixtures=FIXTURE_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "celery_compat.contrib.pytest", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=4)
    dbname = (pytester.path / "dbname.txt").read_text()
    assert dbname.startswith("ujobs_celery_test_")
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:  # dropped when the session ended
        row = admin.execute(
            "select count(*) from pg_database where datname = %s", (dbname,)
        ).fetchone()
        assert row == (0,)


DJANGO_TESTS = """
import threading

import django
import psycopg
import pytest
from celery import shared_task

from celery_compat.contrib.django import DjangoTask

RAN = []
DONE = threading.Event()


@shared_task(name="dj.record")
def record(label):
    RAN.append(label)
    if label == "kept":
        DONE.set()


@pytest.fixture(scope="session")
def celery_parameters():
    return {"task_cls": "celery_compat.contrib.django:DjangoTask"}


def jobs_with(dsn, label):
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select input from x_jobs where name = 'dj.record'").fetchall()
    from celery_compat.sending.message_row import from_input

    return [r for r in rows if from_input(r[0], queue="").args == [label]]


def test_delay_on_commit(celery_app, celery_worker, celery_ujobs_dsn):
    from django.conf import settings

    info = psycopg.conninfo.conninfo_to_dict(celery_ujobs_dsn)
    settings.configure(DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": info["dbname"],
        "USER": info.get("user", ""), "HOST": info.get("host", ""), "PORT": info.get("port", ""),
    }})
    django.setup()
    from django.db import transaction

    task = celery_app.tasks["dj.record"]
    assert isinstance(task, DjangoTask)
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            task.delay_on_commit("dropped")
            raise RuntimeError("roll back")
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            task.delay("rolled back with the transaction")  # the jobs DB is Django's DB
            raise RuntimeError("roll back")
    with transaction.atomic():
        assert task.delay_on_commit("kept") is None
        assert jobs_with(celery_ujobs_dsn, "kept") == []  # not sent before the commit
    assert DONE.wait(10)
    assert RAN == ["kept"]
    assert jobs_with(celery_ujobs_dsn, "dropped") == []
    assert jobs_with(celery_ujobs_dsn, "rolled back with the transaction") == []
    from django.db import connections

    connections.close_all()
"""


def test_django_task_delay_on_commit_sends_only_after_the_commit(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_django_task=DJANGO_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "celery_compat.contrib.pytest", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_celerys_own_manager_inspects_the_test_worker(app: Any) -> None:
    """Celery's test ``Manager``, unmodified, drives the bridge's test worker: ``inspect()``
    answers from its node, ``assert_accepted`` sees a running task, ``wait_until_idle`` purges
    and waits through remote control over Postgres."""
    from celery.contrib.testing.manager import Manager as CeleryManager

    from celery_compat.contrib.testing.manager import Manager

    assert Manager is CeleryManager  # the swapped import is Celery's class itself
    with start_worker(app, perform_ping_check=False, hostname="mgr@test") as w:
        manager = CeleryManager(app)
        assert manager.inspect().ping() == {"mgr@test": {"ok": "pong"}}
        held = app.tasks["contrib.held"].delay()
        assert STARTED.wait(10)
        manager.assert_accepted([held.id], timeout=10)
        active = manager.inspect().active()["mgr@test"]
        assert [(a["id"], a["name"], a["hostname"]) for a in active] == [
            (held.id, "contrib.held", "mgr@test")
        ]
        GATE.set()
        assert held.get(timeout=10) == "released"
        manager.wait_until_idle()
        assert w.hostname == "mgr@test"


def test_a_broadcast_without_reply_accepts_timeout_none_as_celery_does(app: Any) -> None:
    """``AsyncResult.revoke_by_stamped_headers()`` broadcasts with ``timeout=None`` (its default,
    ``wait=False``): Celery sends it; the bridge must not fail on the ``None``."""
    try:
        with start_worker(app, perform_ping_check=False, hostname="stamp@test"):
            result = app.tasks["contrib.add"].delay(1, 2)
            assert result.revoke_by_stamped_headers(headers={"monitoring_id": ["nope"]}) is None
            assert app.control.broadcast("ping", timeout=None) is None
            assert result.get(timeout=10) == 3
    finally:  # the worker's revoked stamps are process memory, as in Celery
        worker_state.revoked_stamps.clear()


def test_revoke_by_stamped_headers_discards_a_stamped_task_and_replies_like_celery(
    app: Any,
) -> None:
    """Celery's worker keeps revoked stamps in ``worker_state.revoked_stamps`` and discards a
    request carrying one (REVOKED); an unstamped task and other values still run."""
    from celery.canvas import StampingVisitor
    from celery.exceptions import TaskRevokedError

    class Monitoring(StampingVisitor):  # type: ignore[misc]
        def __init__(self, value: str) -> None:
            self.value = value

        def on_signature(self, sig: Any, **headers: Any) -> dict[str, Any]:
            return {"monitoring_id": self.value}

    add = app.tasks["contrib.add"]
    worker_state.revoked_stamps.clear()
    try:
        with start_worker(app, perform_ping_check=False, hostname="stamps@test"):
            reply = app.control.revoke_by_stamped_headers(
                {"monitoring_id": ["m-1"]}, terminate=False, reply=True, timeout=10
            )
            assert reply == [
                {
                    "stamps@test": {
                        "ok": "headers {'monitoring_id': ['m-1']} flagged as revoked, "
                        "but not terminated"
                    }
                }
            ]
            assert worker_state.revoked_stamps == {"monitoring_id": ["m-1"]}
            hit, other = add.si(1, 1), add.si(2, 2)
            hit.stamp(visitor=Monitoring("m-1"))
            other.stamp(visitor=Monitoring("m-2"))
            revoked, ran, plain = hit.apply_async(), other.apply_async(), add.delay(3, 3)
            with pytest.raises(TaskRevokedError):
                revoked.get(timeout=10)
            assert revoked.state == states.REVOKED
            assert (ran.get(timeout=10), plain.get(timeout=10)) == (4, 6)
    finally:
        worker_state.revoked_stamps.clear()


def test_a_delay_to_an_idle_worker_is_handed_to_it_and_runs_once(app: Any, dsn: str) -> None:
    """The engine's hand-off (migration 0027) on Celery's send path: a ``.delay()`` into a queue
    whose worker waits idle is claimed for it by the insert and runs once, attempt 1."""
    with start_worker(app, perform_ping_check=False) as w, psycopg.connect(dsn) as conn:
        engine = w.worker

        def armed() -> bool:
            row = conn.execute(
                "select count(*) from x_queue_waiters where worker_id = %s and armed",
                (engine.id,),
            ).fetchone()
            conn.commit()
            return bool(row and row[0] == len(engine.queues))

        wait_for(armed, timeout=10, what="the worker's marks armed for a hand-off")
        before = engine.counts.hand_offs
        assert app.tasks["contrib.add"].delay(20, 22).get(timeout=10) == 42
        assert engine.counts.hand_offs == before + 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select state, attempt from x_jobs where name = 'contrib.add'"
        ).fetchall()
    assert rows == [("done", 1)]
