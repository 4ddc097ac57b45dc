"""django-celery-beat's tables as the bridge scheduler's schedule, with real Django and real
django-celery-beat on the test database: rows created and edited through the ORM fire on the
engine's ``Scheduler`` (frozen clock, ``tick()`` per round), each occurrence one Celery message
counted in the row as django-celery-beat counts it; an edit takes effect at the next round; a
disabled row stops; a clocked one-off fires once; downtime gives what each catch-up policy says;
the overlap policy holds an occurrence back while the previous one runs; and two bridge
schedulers beside django-celery-beat's own beat (the hand-over class) send each occurrence once.

Django is configured once per process (the settings ``test_celery_django`` uses, same database);
``django_celery_beat`` is added with ``override_settings`` and its migrations are applied to the
session database while this module runs; each test empties its tables.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from apps.celery_harness import body_of, bound, headers_of, jobs, worker
from celery_compat import Celery
from celery_compat.beat.django_beat import DjangoBeatSource, convert_tables
from celery_compat.beat.entries import engine_task_name, occurrence_task_id
from conftest import wait_for
from ujobs_bridge import FrozenClock
from ujobs_bridge._internal.scheduling.scheduler import Scheduler

DCB = "django_celery_beat.schedulers:DatabaseScheduler"
TASK = "dcb.tick"


@pytest.fixture(scope="module")
def beat_models(pg_dsn: str) -> Iterator[Any]:
    """django_celery_beat installed and migrated on the session database."""
    had_settings_module = "DJANGO_SETTINGS_MODULE" in os.environ
    from django.conf import settings

    if not settings.configured:
        from apps.celery_proj import settings as process_settings

        process_settings.configure(pg_dsn)
    from django.core.management import call_command
    from django.test.utils import override_settings

    apps = [*settings.INSTALLED_APPS, "django_celery_beat"]
    with override_settings(INSTALLED_APPS=apps):
        call_command("migrate", "django_celery_beat", verbosity=0)
        from django_celery_beat import models

        yield models
        from django.db import connections

        connections.close_all()
    if not had_settings_module:  # the project package sets it; later tests of this process
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)  # must not load Django through Celery
        from django.db import connections

        connections.close_all()


@pytest.fixture
def m(beat_models: Any, dsn: str) -> Any:
    for model in (
        beat_models.PeriodicTask,
        beat_models.PeriodicTasks,
        beat_models.IntervalSchedule,
        beat_models.CrontabSchedule,
        beat_models.ClockedSchedule,
        beat_models.SolarSchedule,
    ):
        model.objects.all().delete()
    return beat_models


APP = Celery("dcb_tests")
APP.conf.update(beat_scheduler=DCB, timezone="UTC")


@APP.task(name=TASK, shared=False)
def tick(label: str, **kwargs: Any) -> str:
    return label


@pytest.fixture
def app(dsn: str, m: Any) -> Iterator[Any]:
    with bound(APP, dsn):
        yield APP


def start_instant() -> datetime:
    """T0: after the real now (Django stamps ``date_changed`` with it), on a whole 5 minutes,
    so the grid instants below are easy to name. The clock starts one second before it."""
    now = datetime.now(UTC) + timedelta(minutes=10)
    return now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(start_instant() - timedelta(seconds=1))


def edited(m: Any, row: Any, clock: FrozenClock) -> None:
    """Say the row was last edited at the frozen instant (``date_changed`` is Django's
    ``auto_now``, the real clock; ``update()`` sets it as it is)."""
    m.PeriodicTask.objects.filter(pk=row.pk).update(date_changed=clock.now())


@pytest.fixture
def make(dsn: str, app: Any) -> Iterator[Callable[..., Scheduler]]:
    made: list[Scheduler] = []

    def build(clock: FrozenClock) -> Scheduler:
        source = DjangoBeatSource(app, now=clock.sql_now)
        s = Scheduler(dsn, {}, clock=clock, holder=f"dcb-{len(made)}", source=source)
        made.append(s)
        return s

    yield build
    for s in made:
        s.stop()


def every(m: Any, seconds: int) -> Any:
    return m.IntervalSchedule.objects.create(every=seconds, period="seconds")


def periodic(m: Any, name: str, label: str, **fields: Any) -> Any:
    """A row made through the ORM, last edited one second before T0."""
    fields.setdefault("task", TASK)
    row = m.PeriodicTask.objects.create(name=name, args=json.dumps([label]), **fields)
    before = start_instant() - timedelta(seconds=2)
    m.PeriodicTask.objects.filter(pk=row.pk).update(date_changed=before)
    return row


def sent(dsn: str, label: str | None = None) -> list[dict[str, Any]]:
    rows = jobs(dsn, TASK)
    return [r for r in rows if label is None or body_of(r)["args"] == [label]]


def occurrences(rows: list[dict[str, Any]]) -> list[str]:
    return [headers_of(r)["ujobs_occurrence"] for r in rows]


def run(s: Scheduler, clock: FrozenClock, to: datetime) -> int:
    clock.set(to)
    return s.tick()


def test_crontab_and_interval_rows_fire_each_occurrence_once_and_count_it(
    m: Any, make: Callable[..., Scheduler], clock: FrozenClock, dsn: str
) -> None:
    t0 = clock.now() + timedelta(seconds=1)
    periodic(
        m,
        "ten seconds",
        "iv",
        interval=every(m, 10),
        queue="reports",
        priority=3,
        headers=json.dumps({"tenant": "acme"}),
    )
    cron = m.CrontabSchedule.objects.create(minute="*/5", hour="*", timezone="UTC")
    periodic(m, "five minutes", "cron", crontab=cron, kwargs=json.dumps({"n": 1}))
    s = make(clock)
    assert s.tick() == 0  # the first round only reads the rows
    assert run(s, clock, t0 + timedelta(milliseconds=100)) == 2  # both are due at T0
    assert run(s, clock, t0 + timedelta(seconds=10, milliseconds=200)) == 1
    assert s.tick() == 0  # the same occurrence is never sent twice
    row = sent(dsn, "iv")[-1]
    h = headers_of(row)
    assert (row["queue"], row["priority"]) == ("reports", 3)
    assert (h["periodic_task_name"], h["tenant"]) == ("ten seconds", "acme")
    assert h["id"] == occurrence_task_id("ten seconds", t0 + timedelta(seconds=10))
    counted = m.PeriodicTask.objects.get(name="ten seconds")
    assert counted.total_run_count == 2
    assert counted.last_run_at == t0 + timedelta(seconds=10, milliseconds=200)

    assert run(s, clock, t0 + timedelta(minutes=5, milliseconds=100)) == 2  # both are due
    assert occurrences(sent(dsn, "cron")) == [
        t0.isoformat(),
        (t0 + timedelta(minutes=5)).isoformat(),
    ]
    assert body_of(sent(dsn, "cron")[0])["kwargs"] == {"n": 1}
    assert m.PeriodicTask.objects.get(name="five minutes").total_run_count == 2
    assert m.PeriodicTask.objects.get(name="ten seconds").total_run_count == 3


def test_an_orm_edit_changes_the_next_fire_and_a_disabled_row_stops_without_restart(
    m: Any, make: Callable[..., Scheduler], clock: FrozenClock, dsn: str
) -> None:
    t0 = clock.now() + timedelta(seconds=1)
    schedule = every(m, 10)
    row = periodic(m, "edited", "e", interval=schedule)
    s = make(clock)
    s.tick()
    assert run(s, clock, t0 + timedelta(seconds=10, milliseconds=100)) == 1
    schedule.every = 60  # an edit of the schedule row (PeriodicTasks.changed moves)
    schedule.save()
    assert run(s, clock, t0 + timedelta(seconds=20, milliseconds=100)) == 0  # was due at 10 s
    assert run(s, clock, t0 + timedelta(seconds=60, milliseconds=100)) == 1
    assert occurrences(sent(dsn)) == [
        (t0 + timedelta(seconds=10)).isoformat(),
        (t0 + timedelta(seconds=60)).isoformat(),
    ]

    row.refresh_from_db()
    row.enabled = False
    row.save()
    assert run(s, clock, t0 + timedelta(minutes=5, milliseconds=100)) == 0
    assert len(sent(dsn)) == 2
    row.refresh_from_db()
    assert row.last_run_at is None  # django-celery-beat's save() clears it on disable
    row.headers = '{"ujobs_catch_up": "all"}'
    row.enabled = True  # re-enabled at T0 + 5 min: the disabled minutes are not caught up,
    row.save()  # even under "all"; the minutes since the re-enabling edit are
    edited(m, row, clock)
    assert run(s, clock, t0 + timedelta(minutes=10, milliseconds=100)) == 5
    assert occurrences(sent(dsn))[2:] == [
        (t0 + timedelta(minutes=k)).isoformat() for k in range(6, 11)
    ]


def test_a_clocked_one_off_fires_once_and_is_disabled(
    m: Any, make: Callable[..., Scheduler], clock: FrozenClock, dsn: str
) -> None:
    t0 = clock.now() + timedelta(seconds=1)
    at = m.ClockedSchedule.objects.create(clocked_time=t0 + timedelta(seconds=5))
    periodic(m, "once", "o", clocked=at, one_off=True)
    s = make(clock)
    assert s.tick() == 0
    assert run(s, clock, t0 + timedelta(seconds=4)) == 0
    assert run(s, clock, t0 + timedelta(seconds=5, milliseconds=300)) == 1
    for later in (6, 60, 3600):
        assert run(s, clock, t0 + timedelta(seconds=later)) == 0
    assert occurrences(sent(dsn)) == [(t0 + timedelta(seconds=5)).isoformat()]
    done = m.PeriodicTask.objects.get(name="once")
    assert (done.enabled, done.total_run_count) == (False, 1)


def test_start_time_and_expires_bound_the_fires_and_an_expired_row_is_disabled(
    m: Any, make: Callable[..., Scheduler], clock: FrozenClock, dsn: str
) -> None:
    t0 = clock.now() + timedelta(seconds=1)
    ten = every(m, 10)
    periodic(m, "late start", "start", interval=ten, start_time=t0 + timedelta(seconds=15))
    periodic(m, "expiring", "expires", interval=ten, expires=t0 + timedelta(seconds=25))
    s = make(clock)
    s.tick()
    for k in range(5):
        run(s, clock, t0 + timedelta(seconds=10 * k, milliseconds=100))
    assert occurrences(sent(dsn, "start")) == [
        (t0 + timedelta(seconds=k)).isoformat() for k in (20, 30, 40)
    ]
    assert occurrences(sent(dsn, "expires")) == [
        (t0 + timedelta(seconds=k)).isoformat() for k in (0, 10, 20)
    ]
    expired = m.PeriodicTask.objects.get(name="expiring")
    assert (expired.enabled, expired.total_run_count) == (False, 3)


def test_thirty_minutes_of_downtime_give_what_each_catch_up_policy_says(
    m: Any, make: Callable[..., Scheduler], clock: FrozenClock, dsn: str
) -> None:
    t0 = clock.now() + timedelta(seconds=1)
    minute = every(m, 60)
    periodic(m, "skip", "skip", interval=minute)  # the default
    periodic(m, "run-once", "run-once", interval=minute, headers='{"ujobs_catch_up": "run-once"}')
    capped = '{"ujobs_catch_up": "all", "ujobs_max_catch_up": 12}'
    periodic(m, "all", "all", interval=minute, headers=capped)
    s = make(clock)
    s.tick()
    s.stop()  # the scheduler is down for thirty minutes
    clock.set(t0 + timedelta(minutes=30, milliseconds=500))
    back = make(clock)
    assert back.tick() == 1 + 1 + 12
    last = (t0 + timedelta(minutes=30)).isoformat()
    [skipped] = sent(dsn, "skip")
    assert (headers_of(skipped)["ujobs_occurrence"], headers_of(skipped)["ujobs_catch_up"]) == (
        last,
        False,  # the latest occurrence is on time
    )
    [once] = sent(dsn, "run-once")
    assert (headers_of(once)["ujobs_occurrence"], headers_of(once)["ujobs_catch_up"]) == (
        last,
        True,  # it stands in for the thirty
    )
    assert back.tick() == 12 and back.tick() == 7  # the cap holds per round
    assert back.tick() == 0
    everyone = [(t0 + timedelta(minutes=k)).isoformat() for k in range(31)]  # T0 .. T0 + 30
    assert occurrences(sent(dsn, "all")) == everyone
    assert "ujobs_max_catch_up" not in headers_of(sent(dsn, "all")[0])  # a policy, not a header
    assert m.PeriodicTask.objects.get(name="all").total_run_count == 31
    assert m.PeriodicTask.objects.get(name="skip").total_run_count == 1


def test_overlap_skip_holds_an_occurrence_while_the_previous_one_waits(
    m: Any, make: Callable[..., Scheduler], clock: FrozenClock, dsn: str, app: Any
) -> None:
    t0 = clock.now() + timedelta(seconds=1)
    ten = every(m, 10)
    periodic(m, "lonely", "lonely", interval=ten, headers='{"ujobs_overlap": "skip"}')
    periodic(m, "crowd", "crowd", interval=ten)
    s = make(clock)
    s.tick()
    assert run(s, clock, t0 + timedelta(seconds=10, milliseconds=100)) == 2
    assert run(s, clock, t0 + timedelta(seconds=20, milliseconds=100)) == 2  # both fire...
    assert len(sent(dsn, "lonely")) == 1  # ...but the first message of "lonely" still waits
    assert len(sent(dsn, "crowd")) == 2
    with worker(app, dsn, start=False) as w:
        while w.tick():
            pass
    assert run(s, clock, t0 + timedelta(seconds=30, milliseconds=100)) == 2
    assert len(sent(dsn, "lonely")) == 2
    assert m.PeriodicTask.objects.get(name="lonely").total_run_count == 2


def test_beat_convert_lists_the_rows_and_refuses_solar(m: Any, app: Any, dsn: str) -> None:
    periodic(m, "ten", "x", interval=every(m, 10), headers='{"ujobs_catch_up": "all"}')
    sun = m.SolarSchedule.objects.create(event="sunrise", latitude=52.5, longitude=13.4)
    periodic(m, "dawn", "y", solar=sun)
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = {c.name: c.as_dict() for c in convert_tables(app, conn)}
    assert got["ten"]["ok"] and got["ten"]["kind"] == "interval"
    assert (got["ten"]["every_s"], got["ten"]["catch_up"]) == (10.0, "all")
    assert got["ten"]["engine_task"] == engine_task_name("ten")
    assert not got["dawn"]["ok"] and "solar" in got["dawn"]["reason"]


def test_two_schedulers_and_django_celery_beats_beat_send_each_occurrence_once(
    m: Any, app: Any, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Real time: two bridge schedulers (services) and django-celery-beat's beat (the hand-over
    class, ticked in a thread as ``celery beat`` ticks it) on one 1-second interval row."""
    from celery_compat.beat.django_scheduler import DatabaseScheduler

    m.PeriodicTask.objects.create(name="handover", task=TASK, args='["h"]', interval=every(m, 1))
    caplog.set_level(logging.INFO, logger="celery_compat.beat_scheduler")
    stop = threading.Event()
    beat = DatabaseScheduler(app=app, lazy=False)

    def beat_loop() -> None:
        from django.db import connections

        try:
            while not stop.is_set():
                stop.wait(min(beat.tick(), 0.2))
        finally:
            connections.close_all()  # this thread's own Django connection

    schedulers = [
        Scheduler(dsn, {}, holder=f"live-{i}", interval_s=0.5, source=DjangoBeatSource(app))
        for i in range(2)
    ]
    thread = threading.Thread(target=beat_loop, daemon=True)
    try:
        for s in schedulers:
            s.start()
        thread.start()

        def by_both() -> bool:
            beat_sent = any("beat_scheduler.sent" in r.getMessage() for r in caplog.records)
            return (
                beat_sent and sum(s.counts.fired for s in schedulers) >= 2 and len(sent(dsn)) >= 6
            )

        wait_for(by_both, timeout=60, what="occurrences sent by beat and by a scheduler")
    finally:
        stop.set()
        thread.join(timeout=10)
        for s in schedulers:
            s.stop()
    rows = sent(dsn)
    assert all("ujobs_occurrence" in headers_of(r) for r in rows)  # beat sent occurrences too
    counts = Counter(occurrences(rows))
    assert counts and max(counts.values()) == 1, counts
    ids = [headers_of(r)["id"] for r in sent(dsn)]
    assert len(ids) == len(set(ids))


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_celery_beat"


def test_manage_py_ujobs_scheduler_fires_the_rows_and_applies_an_edit_live(
    m: Any, dsn: str
) -> None:
    """The example project (Celery's Django-guide layout): ``manage.py ujobs_scheduler`` with
    nothing but Django's settings fires a row, picks up an ORM edit while it runs, and stops on
    SIGTERM with exit 0."""
    task = "reports.tasks.nightly_report"
    row = m.PeriodicTask.objects.create(
        name="nightly", task=task, args='["before"]', interval=every(m, 1)
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "proj.settings",
        "DATABASE_URL": dsn,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("UJOBS_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "ujobs_scheduler", "--interval", "0.5"],
        cwd=EXAMPLE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def labels() -> list[Any]:
        return [body_of(r)["args"][0] for r in jobs(dsn, task)]

    try:
        wait_for(lambda: "before" in labels(), timeout=60, what="a message of the row")
        row.refresh_from_db()
        row.args = '["after"]'
        row.save()  # the admin's save: PeriodicTasks.changed moves
        wait_for(lambda: "after" in labels(), timeout=60, what="a message of the edited row")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "scheduler stopped" in out, out
    assert m.PeriodicTask.objects.get(name="nightly").total_run_count == len(labels())


def manage(dsn: str, *args: str, timeout: float = 120) -> str:
    """``python manage.py ARGS`` in the example project, on the test database."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE,
        env=example_env(dsn),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def example_env(dsn: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "proj.settings",
        "DATABASE_URL": dsn,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("UJOBS_DATABASE_URL", None)
    return env


STAFF = (
    "from django.contrib.auth.models import User\n"
    "u, _ = User.objects.get_or_create(username='ops')\n"
    "u.is_staff = u.is_superuser = True\n"
    "u.set_password('ops-password')\n"
    "u.save()\n"
)


def test_an_admin_edit_in_chromium_changes_what_the_running_scheduler_sends(
    m: Any, dsn: str
) -> None:
    """The example's admin (``runserver``) and ``manage.py ujobs_scheduler`` side by side: a
    staff user changes a row's arguments in headless Chromium; the next message carries them."""
    from dashboard_support import browser
    from selenium.webdriver.common.by import By

    driver = browser()
    manage(dsn, "migrate", "--noinput")
    manage(dsn, "shell", "-c", STAFF)
    task = "reports.tasks.nightly_report"
    row = m.PeriodicTask.objects.create(
        name="from the admin", task=task, args='["before"]', interval=every(m, 1)
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", *argv],
            cwd=EXAMPLE,
            env=example_env(dsn),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for argv in (
            ["ujobs_scheduler", "--interval", "0.5"],
            ["runserver", "--noreload", "--insecure", f"127.0.0.1:{port}"],
        )
    ]

    def labels() -> list[Any]:
        return [body_of(r)["args"][0] for r in jobs(dsn, task)]

    base = f"http://127.0.0.1:{port}/admin/"
    try:
        wait_for(lambda: "before" in labels(), timeout=60, what="a message of the row")

        def login_page() -> bool:
            driver.get(f"{base}login/")
            return bool(driver.find_elements(By.NAME, "username"))

        wait_for(login_page, timeout=60, what="the admin's login page")
        driver.find_element(By.NAME, "username").send_keys("ops")
        driver.find_element(By.NAME, "password").send_keys("ops-password")
        driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        driver.get(f"{base}django_celery_beat/periodictask/{row.pk}/change/")
        for summary in driver.find_elements(By.CSS_SELECTOR, "fieldset details summary"):
            summary.click()  # open the collapsed sections ("Arguments" is one)
        args = driver.find_element(By.NAME, "args")
        args.clear()
        args.send_keys('["after"]')
        driver.find_element(By.NAME, "_save").click()
        wait_for(
            lambda: "was changed successfully" in driver.page_source,
            timeout=30,
            what="the admin's confirmation",
        )
        wait_for(lambda: "after" in labels(), timeout=60, what="a message of the edited row")
    finally:
        driver.quit()
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert procs[0].returncode == 0


def test_celery_beat_with_django_celery_beats_scheduler_runs_the_hand_over_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``celery beat`` on a celery_compat app whose ``beat_scheduler`` is django-celery-beat's
    (what ``CELERY_BEAT_SCHEDULER`` says) runs Celery's beat with the class that sends bridge
    occurrences, so it can run beside the bridge scheduler."""
    import celery.apps.beat

    given: dict[str, Any] = {}

    class Recorded:
        def __init__(self, **kwargs: Any) -> None:
            given.update(kwargs)

        def run(self) -> None:
            given["ran"] = True

    monkeypatch.setattr(celery.apps.beat, "Beat", Recorded)
    APP.Beat(scheduler=APP.conf.beat_scheduler).run()
    assert given["scheduler"] == "celery_compat.beat.django_scheduler:DatabaseScheduler"
    assert given["ran"]
