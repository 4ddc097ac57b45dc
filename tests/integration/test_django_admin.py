"""The bridge in Django's admin (``ujobs_django.jobs``), in a real headless Chromium against a
real Django server on the test database: a staff user logs in, sees the job list and the dead
letters, and retries a dead letter with the admin's action (the job is ready again and a worker
runs it); a staff user without the retry permission is not offered the action, and a forged
request for it leaves the row dead. The schedules and workers lists render the engine's rows.
A screenshot of the dead letters is saved under ``UJOBS_SCREENSHOTS`` (default
``artifacts/django-admin``).

Django is configured once per process (``apps.celery_proj.settings``, as the other Django tests
do); the admin's apps, middleware, templates and URLconf are put over it while this module runs,
and their tables migrated into the session database."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dashboard_support import browser

from conftest import wait_for
from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge.client import Client
from ujobs_bridge.testing import run_until_idle

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("UJOBS_SCREENSHOTS") or ROOT / "artifacts" / "django-admin")
PASSWORD = "a-test-password-1"
ADMIN_SETTINGS: dict[str, Any] = {
    "MIDDLEWARE": [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ],
    "TEMPLATES": [
        {
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {
                "context_processors": [
                    "django.template.context_processors.request",
                    "django.contrib.auth.context_processors.auth",
                    "django.contrib.messages.context_processors.messages",
                ]
            },
        }
    ],
    "ROOT_URLCONF": "apps.django_admin_urls",
    "STATIC_URL": "/static/",
    "ALLOWED_HOSTS": ["127.0.0.1", "testserver"],
    "UJOBS_ADMIN_DATABASE": "default",
}
ADMIN_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ujobs_django.jobs",
]


@job(queue="basic", max_attempts=1)
def broken_add(a: int, b: int) -> int:
    raise RuntimeError("the first deploy of add was broken")


@pytest.fixture(scope="module")
def site(pg_dsn: str) -> Iterator[str]:
    """The admin's settings in force and a Django server on a free port: its address."""
    had_settings_module = "DJANGO_SETTINGS_MODULE" in os.environ
    from django.conf import settings

    if not settings.configured:
        from apps.celery_proj import settings as process_settings

        process_settings.configure(pg_dsn)
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.management import call_command
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.test.utils import override_settings

    class Quiet(WSGIRequestHandler):  # type: ignore[misc]
        def log_message(self, *args: Any) -> None:
            pass

    apps = [*settings.INSTALLED_APPS, *ADMIN_APPS]
    with override_settings(INSTALLED_APPS=apps, **ADMIN_SETTINGS):
        call_command("migrate", verbosity=0)
        server = ThreadedWSGIServer(("127.0.0.1", 0), Quiet, allow_reuse_address=False)
        server.set_app(StaticFilesHandler(WSGIHandler()))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            from django.db import connections

            connections.close_all()
    if not had_settings_module:  # the project package sets it; later tests of this process
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)  # must not load Django through Celery


@pytest.fixture
def users(site: str, dsn: str) -> Iterator[dict[str, Any]]:
    """``operator``: staff who may view everything and retry; ``viewer``: staff who may only
    view."""
    from django.contrib.auth.models import Permission, User

    User.objects.filter(username__in=["operator", "viewer"]).delete()
    views = Permission.objects.filter(
        content_type__app_label="ujobs_jobs", codename__startswith="view_"
    )
    assert {p.codename for p in views} == {
        "view_job",
        "view_deadletter",
        "view_schedule",
        "view_worker",
    }
    made = {}
    for name in ("operator", "viewer"):
        user = User.objects.create_user(name, password=PASSWORD, is_staff=True)
        user.user_permissions.add(*views)
        made[name] = user
    made["operator"].user_permissions.add(
        *Permission.objects.filter(codename__in=["retry_deadletter", "retry_job"])
    )
    yield made
    User.objects.filter(username__in=["operator", "viewer"]).delete()


@pytest.fixture
def driver() -> Iterator[Any]:
    d = browser()
    try:
        yield d
    finally:
        d.quit()


def dead_add(dsn: str, client: Client, *args: Any) -> Any:
    """An ``apps.basic_jobs.add`` job made dead by a broken body (as after a bad deploy)."""
    from apps.basic_jobs import add

    broken = broken_add.with_options(name=add.name)  # max_attempts=1: dead at once
    ref = broken.configure(client=client).enqueue(*args)
    run_until_idle(Worker(dsn, {add.name: broken}, WorkerConfig(queues=("basic",))))
    return ref


def log_in(driver: Any, site: str, name: str) -> None:
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(f"{site}/admin/login/?next=/admin/")
    driver.find_element(By.ID, "id_username").send_keys(name)
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for(lambda: "Jobs (ujobs-bridge)" in driver.page_source, timeout=30, what="the index")


def state_of(dsn: str, job_id: Any) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select state from x_jobs where id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_staff_see_jobs_and_dead_letters_and_retry_one_a_viewer_is_refused(
    site: str, users: dict[str, Any], dsn: str, client: Client, driver: Any
) -> None:
    from django.test import Client as DjangoClient
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from apps.basic_jobs import add

    dead = dead_add(dsn, client, 20, 22)
    waiting = add.configure(client=client).enqueue(1, 2)
    dead_page = f"{site}/admin/ujobs_jobs/deadletter/"

    # The viewer sees the lists but is offered no action; a forged retry changes nothing.
    log_in(driver, site, "viewer")
    driver.get(dead_page)
    assert "the first deploy of add was broken" in driver.page_source
    assert driver.find_elements(By.NAME, "action") == []
    forged = DjangoClient()
    forged.force_login(users["viewer"])
    reply = forged.post(
        "/admin/ujobs_jobs/deadletter/",
        {"action": "retry", "_selected_action": [str(dead.id)], "index": "0"},
    )
    assert reply.status_code in (200, 302)
    assert state_of(dsn, dead.id) == "dead"

    # The operator sees both lists and retries the dead letter.
    log_in(driver, site, "operator")
    driver.get(f"{site}/admin/ujobs_jobs/job/")
    rows = driver.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 2 and all("apps.basic_jobs.add" in r.text for r in rows)
    states = {cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "td.field-state")}
    assert states == {"dead", "ready"}
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / "admin-jobs.png"))
    driver.get(f"{site}/admin/ujobs_jobs/job/{dead.id}/change/")  # its page: read-only, whole
    assert "RuntimeError: the first deploy of add was broken" in driver.page_source
    assert "Traceback (most recent call last)" in driver.page_source
    assert driver.find_elements(By.NAME, "_save") == []
    driver.get(dead_page)
    (row,) = driver.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert "RuntimeError: the first deploy of add was broken" in row.text
    driver.save_screenshot(str(SHOTS / "admin-dead-letters.png"))
    row.find_element(By.CSS_SELECTOR, "input.action-select").click()
    Select(driver.find_element(By.NAME, "action")).select_by_value("retry")
    driver.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    wait_for(lambda: "Retried 1 of 1 selected." in driver.page_source, timeout=30, what="the note")
    driver.save_screenshot(str(SHOTS / "admin-retried.png"))
    assert state_of(dsn, dead.id) == "ready"
    assert driver.find_elements(By.CSS_SELECTOR, "#result_list tbody tr") == []
    assert state_of(dsn, waiting.id) == "ready"

    run_until_idle(Worker(dsn, {add.name: add}, WorkerConfig(queues=("basic",))))
    assert state_of(dsn, dead.id) == "done"
    for page in ("schedule", "worker"):
        driver.get(f"{site}/admin/ujobs_jobs/{page}/")
        assert "Select" in driver.title


def test_cancel_and_discard_run_with_their_permission_only(
    site: str, users: dict[str, Any], dsn: str, client: Client
) -> None:
    """Cancel (jobs) and discard (dead letters), through the admin's own views: refused to the
    viewer, done for the operator once given each permission; the cancel names its user."""
    from django.contrib.auth.models import Permission
    from django.test import Client as DjangoClient

    from apps.basic_jobs import add

    dead = dead_add(dsn, client, 1, 1)
    waiting = add.configure(client=client).enqueue(1, 2)
    browser_of = {name: DjangoClient() for name in users}
    for name, user in users.items():
        browser_of[name].force_login(user)

    def post(name: str, model: str, action: str, job_id: Any) -> Any:
        data = {"action": action, "_selected_action": [str(job_id)], "index": "0"}
        return browser_of[name].post(f"/admin/ujobs_jobs/{model}/", data, follow=True)

    for name in ("viewer", "operator"):  # neither holds cancel_job nor discard_deadletter yet
        post(name, "job", "cancel", waiting.id)
        post(name, "deadletter", "discard", dead.id)
    assert (state_of(dsn, waiting.id), state_of(dsn, dead.id)) == ("ready", "dead")

    users["operator"].user_permissions.add(
        *Permission.objects.filter(codename__in=["cancel_job", "discard_deadletter"])
    )
    browser_of["operator"].force_login(users["operator"])  # permissions are cached per user
    page = post("operator", "job", "cancel", waiting.id)
    assert "Cancelled 1 of 1 selected." in page.content.decode()
    assert state_of(dsn, waiting.id) == "cancelled"
    page = post("operator", "deadletter", "discard", dead.id)
    assert "Discarded 1 of 1 selected." in page.content.decode()
    with psycopg.connect(dsn, autocommit=True) as conn:
        left = conn.execute("select id, last_error from x_jobs order by created_at").fetchall()
    assert left == [(waiting.id, "UJ_JOB_CANCELLED: cancelled from the Django admin by operator")]


@job(queue="basic", max_attempts=1)
def leaky_login(url: str, password: str = "", settings: dict[str, Any] | None = None) -> None:
    raise ValueError(f"login refused: password={password} via {url} with {settings!r}")


ADMIN_SECRETS = ("KwPwd_1", "Nested_9", "UrlPw_3")


def test_a_rows_arguments_result_and_error_are_shown_with_their_secrets_hidden(
    site: str, users: dict[str, Any], dsn: str, client: Client
) -> None:
    """A job's page and the dead-letter list show its arguments (a Celery message's
    ``argsrepr``/``kwargsrepr`` headers among them) and its whole error through the one
    redaction: a password argument, a URL's password, a secret-named dict's nested values."""
    from django.test import Client as DjangoClient

    from apps import celery_tasks as t
    from apps.celery_harness import bound

    url = "postgresql://bob:UrlPw_3@db/prod"
    secrets = {"password": "KwPwd_1", "settings": {"credentials": {"pw": "Nested_9"}}}
    dead = leaky_login.configure(client=client).enqueue(url, **secrets)
    run_until_idle(Worker(dsn, {leaky_login.name: leaky_login}, WorkerConfig(queues=("basic",))))
    assert state_of(dsn, dead.id) == "dead"
    with bound(t.app, dsn):
        sent = t.app.send_task("billing.login", args=[url], kwargs=secrets, queue="nobody")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select id, input::text from x_jobs where input -> 'headers' ->> 'id' = %s",
            (sent.id,),
        ).fetchone()
    assert row is not None and "kwargsrepr" in row[1] and "KwPwd_1" in row[1]  # as sent

    viewer = DjangoClient()
    viewer.force_login(users["viewer"])
    for page in (
        f"/admin/ujobs_jobs/job/{dead.id}/change/",
        f"/admin/ujobs_jobs/job/{row[0]}/change/",
        "/admin/ujobs_jobs/deadletter/",
        f"/admin/ujobs_jobs/deadletter/{dead.id}/change/",
    ):
        reply = viewer.get(page)
        assert reply.status_code == 200, page
        shown = reply.content.decode()
        for secret in ADMIN_SECRETS:
            assert secret not in shown, (page, secret)
    job_page = viewer.get(f"/admin/ujobs_jobs/job/{dead.id}/change/").content.decode()
    assert "password=***" in job_page and "bob:****@db" in job_page
    assert "Traceback (most recent call last)" in job_page  # the whole error, redacted
