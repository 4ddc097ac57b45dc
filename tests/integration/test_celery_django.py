"""A realistic Django project on the bridge (``tests/apps/celery_proj``): ``CELERY_*`` settings via
``config_from_object("django.conf:settings", namespace="CELERY")``, ``autodiscover_tasks()`` over
an installed app whose ``tasks.py`` says ``from celery import shared_task`` (untouched), both
retry styles, and ``transaction.atomic()`` on the jobs database: a rollback leaves no job, a
commit runs it (the order row and its task commit or vanish together)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import celery
import pytest
from celery._state import _set_current_app, get_current_app

from apps.celery_harness import (
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    frozen_app_clock,
    jobs,
    track,
    worker,
)
from celery_compat import Celery

QUEUES = ("shop", "invoices")


def start() -> datetime:
    """The frozen instant, 5 minutes ahead of the test's own now (taken when the test starts, not
    when the module is imported: a test run later than that would see its jobs not yet due)."""
    return datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)


@pytest.fixture(scope="module")
def proj(pg_dsn: str) -> Iterator[tuple[Any, Any]]:
    had_settings_module = "DJANGO_SETTINGS_MODULE" in os.environ
    from apps.celery_proj import settings  # the package sets DJANGO_SETTINGS_MODULE, as projects do

    settings.configure(pg_dsn)
    from django.db import connection

    from apps.celery_proj import celery_app
    from apps.celery_proj.shop import tasks

    with connection.cursor() as cur:
        cur.execute("create table if not exists shop_order (id integer primary key, total numeric)")
    track(celery_app)
    yield celery_app, tasks
    celery_app.ujobs_client.close()
    celery_app.use_ujobs_client(None)
    from django.db import connections

    connections.close_all()
    if not had_settings_module:  # later subprocesses (worker, demo) must not inherit it
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)


@pytest.fixture
def shop(proj: tuple[Any, Any], dsn: str) -> Iterator[tuple[Any, Any]]:
    app, tasks = proj
    tasks.RAN.clear()
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("truncate shop_order")
    previous = get_current_app()
    app.set_current()  # as in a Django process with one app: shared_task proxies resolve to it
    try:
        yield app, tasks
    finally:
        _set_current_app(previous)


def orders() -> list[int]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("select id from shop_order order by id")
        return [r[0] for r in cur.fetchall()]


def test_settings_autodiscovery_and_untouched_shared_task_land_on_the_bridge(
    shop: tuple[Any, Any], dsn: str
) -> None:
    app, tasks = shop
    assert isinstance(app, Celery) and app.conf.task_default_queue == "shop"
    assert app.conf.ujobs_database_url == dsn  # CELERY_UJOBS_DATABASE_URL
    assert "apps.celery_proj.shop.tasks.send_invoice" in app.tasks  # autodiscover_tasks()
    assert tasks.shared_task is celery.shared_task  # the module still imports Celery's own
    with worker(app, dsn, queues=QUEUES):
        invoice = tasks.send_invoice.delay(7)
        assert invoice.get(timeout=10) == "invoice 7 sent"
        child_id = tasks.notify.delay(8).get(timeout=10)  # a shared task sent from a task body
        assert app.AsyncResult(child_id).get(timeout=10) == "invoice 8 sent"
    rows = {j["input"]["headers"]["id"]: j for j in jobs(dsn)}
    assert rows[invoice.id]["queue"] == "invoices"  # CELERY_TASK_ROUTES
    assert rows[child_id]["queue"] == "invoices"
    assert {j["queue"] for j in jobs(dsn, tasks.notify.name)} == {
        "shop"
    }  # CELERY_TASK_DEFAULT_QUEUE


def test_autoretry_style_retries_with_backoff_then_succeeds(
    shop: tuple[Any, Any], dsn: str, monkeypatch: Any
) -> None:
    app, tasks = shop
    clock = frozen_app_clock(app, monkeypatch, start())
    with worker(app, dsn, queues=QUEUES, clock=clock, start=False) as w:
        r = tasks.charge.delay(5, 2)
        etas = []
        for n in range(3):
            assert w.tick() == 1
            rows = jobs(dsn, tasks.charge.name)
            if len(rows) > n + 1:  # this run retried: a new message with an eta
                etas.append((rows[-1]["run_at"] - clock.now()) / timedelta(seconds=1))
                clock.set(rows[-1]["run_at"])
    assert etas == [1, 2]  # retry_backoff=True, no jitter: 1 s, 2 s
    assert r.get(timeout=5) == "charged 5 after 2 retries"
    assert tasks.RAN["charge"] == 3


def test_self_retry_style_retries_on_its_countdown_and_gives_up_with_the_exc(
    shop: tuple[Any, Any], dsn: str, monkeypatch: Any
) -> None:
    app, tasks = shop
    clock = frozen_app_clock(app, monkeypatch, start())
    with worker(app, dsn, queues=QUEUES, clock=clock, start=False) as w:
        ok = tasks.sync_stock.delay("sku-1", 1)
        assert w.tick() == 1
        (retry_row,) = [j for j in jobs(dsn) if j["input"]["headers"]["retries"] == 1]
        assert retry_row["run_at"] == clock.now() + timedelta(seconds=30)
        assert ok.state == "RETRY"
        clock.advance(timedelta(seconds=30))
        assert w.tick() == 1
        assert ok.get(timeout=5) == "sku-1 synced"
        down = tasks.sync_stock.delay("sku-2", 9)
        for _ in range(3):
            assert w.tick() == 1
            clock.advance(timedelta(seconds=30))
        assert w.tick() == 0
    with pytest.raises(ConnectionError, match="warehouse unreachable for sku-2"):
        down.get(timeout=5)


def test_atomic_rollback_leaves_neither_the_order_nor_the_task(
    shop: tuple[Any, Any], dsn: str
) -> None:
    from django.db import connection, transaction

    _app, tasks = shop
    with pytest.raises(RuntimeError, match="card declined"), transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("insert into shop_order (id, total) values (1, 9.5)")
        tasks.send_invoice.delay(1)
        raise RuntimeError("card declined")
    assert orders() == [] and jobs(dsn) == []


def test_atomic_commit_makes_the_task_visible_with_the_order_and_it_runs(
    shop: tuple[Any, Any], dsn: str
) -> None:
    from django.db import connection, transaction

    app, tasks = shop
    with worker(app, dsn, queues=QUEUES):
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("insert into shop_order (id, total) values (2, 12)")
            r = tasks.send_invoice.delay(2)
            assert jobs(dsn) == []  # inserted on Django's connection, not yet committed
        assert orders() == [2]
        assert r.get(timeout=10) == "invoice 2 sent"
        with transaction.atomic():  # the on_commit idiom keeps working unchanged
            transaction.on_commit(lambda: tasks.send_invoice.delay(3))
        assert len(jobs(dsn, tasks.send_invoice.name)) == 2
    assert tasks.RAN["send_invoice"] >= 1


def test_autocommit_off_is_a_transaction_too(shop: tuple[Any, Any], dsn: str) -> None:
    from django.db import transaction

    _app, tasks = shop
    transaction.set_autocommit(False)
    try:
        tasks.send_invoice.delay(4)
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert jobs(dsn) == []
