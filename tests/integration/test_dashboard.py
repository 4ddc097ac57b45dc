"""The dashboard in a real headless Chromium against real workers: the overview's numbers are
the database's, requeueing a dead job from its page makes a worker run it, a ``<script>``
argument is shown as text and runs nothing, actions without the CSRF token or credentials are
refused, ``--read-only`` hides and refuses them. Each page is saved as a screenshot."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import CliProc
from dashboard_support import Dashboard, browser, screenshot

from conftest import wait_for
from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge._internal.config import loading
from ujobs_bridge.client import Client
from ujobs_bridge.testing import run_until_idle

pytestmark = pytest.mark.timeout(300)


@job(queue="basic", max_attempts=1)
def broken_add(a: int, b: int) -> int:
    raise RuntimeError("the first deploy of add was broken")


@pytest.fixture
def started() -> Iterator[list[Any]]:
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        thing.quit() if hasattr(thing, "quit") else thing.close()


def _dead_add(dsn: str, client: Client, *args: Any) -> Any:
    """An ``apps.basic_jobs.add`` job made dead by a broken body (as after a bad deploy)."""
    from apps.basic_jobs import add

    broken = broken_add.with_options(name=add.name)  # max_attempts=1: dead at once
    ref = broken.configure(client=client).enqueue(*args)
    run_until_idle(Worker(dsn, {add.name: broken}, WorkerConfig(queues=("basic",))))
    return ref


def _counts(db: psycopg.Connection[Any]) -> dict[tuple[str, str], int]:
    rows = db.execute(
        "select queue, case when state = 'ready' and run_at > now() then 'scheduled' else state end,"
        " count(*) from x_jobs group by 1, 2"
    ).fetchall()
    return {(r[0], r[1]): r[2] for r in rows}


def test_overview_numbers_match_the_database_and_every_page_renders(
    dsn: str, client: Client, db: psycopg.Connection[Any], tmp_path: Path, started: list[Any]
) -> None:
    from apps.basic_jobs import add, always_fails

    _dead_add(dsn, client, 1, 2)
    jobs = loading.load("apps.basic_jobs")
    always_fails.configure(client=client).enqueue()
    run_until_idle(
        Worker(dsn, {always_fails.name: jobs[always_fails.name]}, WorkerConfig(queues=("basic",)))
    )
    for i in range(3):
        add.configure(client=client).enqueue(i, i)
    add.configure(client=client, delay=3600).enqueue(9, 9)
    for i in range(2):
        add.configure(client=client, queue="emails").enqueue(i, 0)
    dash = Dashboard(dsn, tmp_path / "dash.log")
    started.append(dash)
    driver = browser()
    started.append(driver)
    from selenium.webdriver.common.by import By

    driver.get(dash.base + "/")
    expected = _counts(db)
    shown = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#queues tbody tr[data-queue]"):
        queue = row.get_attribute("data-queue")
        for col in ("ready", "running", "scheduled", "dead"):
            shown[(queue, col)] = int(row.find_element(By.CSS_SELECTOR, f'[data-col="{col}"]').text)
    for (queue, col), n in shown.items():
        assert n == expected.get((queue, col), 0), (queue, col, shown, expected)
    assert shown[("basic", "ready")] == 3 and shown[("basic", "scheduled")] == 1
    assert shown[("basic", "dead")] == 2 and shown[("emails", "ready")] == 2
    assert "done 0" in driver.find_element(By.CSS_SELECTOR, ".legend").text
    assert "dead letters 2" in driver.find_element(By.CSS_SELECTOR, ".legend").text
    screenshot(driver, "overview")
    for name, path in [("jobs", "/jobs"), ("dead", "/dead"), ("scheduled", "/scheduled"),
                       ("workers-none", "/workers"), ("quarantine", "/quarantine")]:  # fmt: skip
        driver.get(dash.base + path)
        assert driver.find_element(By.TAG_NAME, "h1").text, path
        screenshot(driver, name)
    driver.get(dash.base + "/jobs?name=apps.basic_jobs.a*&state=dead")
    assert len(driver.find_elements(By.CSS_SELECTOR, "table.jobs tbody td.id")) == 2


def test_requeueing_a_dead_job_from_its_page_makes_a_worker_run_it(
    dsn: str, client: Client, db: psycopg.Connection[Any], tmp_path: Path, started: list[Any]
) -> None:
    ref = _dead_add(dsn, client, 20, 22)
    dash = Dashboard(dsn, tmp_path / "dash.log")
    started.append(dash)
    worker = CliProc(
        ["worker", "-A", "apps.basic_jobs", "--poll", "0.2", "--dsn", dsn], tmp_path / "w.log"
    )
    started.append(worker)
    driver = browser()
    started.append(driver)
    from selenium.webdriver.common.by import By

    driver.get(f"{dash.base}/jobs/{ref.id}")
    assert "the first deploy of add was broken" in driver.find_element(By.ID, "error").text
    screenshot(driver, "job-dead")
    driver.find_element(By.ID, "requeue").click()
    wait_for(lambda: "requeued this job" in driver.page_source, timeout=30, what="the redirect")

    def state() -> Any:
        return db.execute("select state, output from x_jobs where id = %s", (ref.id,)).fetchone()

    wait_for(lambda: state()[0] == "done", timeout=60, what="the worker to run the requeued job")
    assert state()[1] == 42
    driver.get(f"{dash.base}/jobs/{ref.id}")
    assert driver.find_element(By.ID, "output").text == "42"
    screenshot(driver, "job-done")
    driver.get(f"{dash.base}/workers")
    (row,) = driver.find_elements(By.CSS_SELECTOR, "#workers tbody tr[data-node]")
    assert "basic" in row.text and "threads" in row.text
    screenshot(driver, "workers")


def test_a_script_argument_is_shown_as_text_and_runs_nothing(
    dsn: str, client: Client, tmp_path: Path, started: list[Any]
) -> None:
    from apps.basic_jobs import add

    evil = "<script>alert(1)</script>"
    ref = add.configure(client=client).enqueue(evil, "[link=https://x.example]y[/link]")
    dash = Dashboard(dsn, tmp_path / "dash.log")
    started.append(dash)
    driver = browser()
    started.append(driver)
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    for path in (f"/jobs/{ref.id}", "/jobs", "/"):
        driver.get(dash.base + path)
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018 (reading it is the check)
        assert driver.find_elements(By.TAG_NAME, "script") == []
    driver.get(f"{dash.base}/jobs/{ref.id}")
    shown = driver.find_element(By.ID, "input").text
    assert evil in shown and "[link=https://x.example]y[/link]" in shown
    screenshot(driver, "job-escaped")


def test_actions_need_the_csrf_token_and_the_credentials(
    dsn: str, client: Client, db: psycopg.Connection[Any], tmp_path: Path, started: list[Any]
) -> None:
    ref = _dead_add(dsn, client, 1, 1)
    dash = Dashboard(dsn, tmp_path / "dash.log", "--auth", "ops:s3cret")
    started.append(dash)
    auth = ("ops", "s3cret")
    assert dash.request("/")[0] == 401
    assert dash.request("/", auth=("ops", "wrong"))[0] == 401
    assert dash.request("/metrics")[0] == 401
    assert dash.request("/healthz")[0] == 200  # probes answer without credentials
    status, page = dash.request(f"/jobs/{ref.id}", auth=auth)
    assert status == 200
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]
    requeue = f"/jobs/{ref.id}/requeue"
    assert dash.request(requeue, data={}, auth=auth)[0] == 403
    assert dash.request(requeue, data={"csrf_token": "0" * 64}, auth=auth)[0] == 403
    assert dash.request(requeue, data={"csrf_token": token})[0] == 401
    assert dash.request("/dead/requeue", data={"csrf_token": "x"}, auth=auth)[0] == 403
    assert db.execute("select state from x_jobs where id = %s", (ref.id,)).fetchone() == ("dead",)
    assert dash.request(requeue, data={"csrf_token": token}, auth=auth)[0] == 303
    assert db.execute("select state from x_jobs where id = %s", (ref.id,)).fetchone() == ("ready",)


def test_a_non_local_bind_without_credentials_is_refused(dsn: str, tmp_path: Path) -> None:
    proc = CliProc(["dashboard", "--address", "0.0.0.0", "--dsn", dsn], tmp_path / "d.log")
    try:
        assert proc.wait(timeout=60) == 2
        assert "give --auth USER:PASS or set $UJOBS_DASHBOARD_TOKEN" in proc.output()
    finally:
        proc.close()


def test_read_only_hides_and_refuses_actions(
    dsn: str, client: Client, db: psycopg.Connection[Any], tmp_path: Path, started: list[Any]
) -> None:
    ref = _dead_add(dsn, client, 1, 1)
    dash = Dashboard(dsn, tmp_path / "dash.log", "--read-only")
    started.append(dash)
    driver = browser()
    started.append(driver)
    from selenium.webdriver.common.by import By

    for path in (f"/jobs/{ref.id}", "/dead"):
        driver.get(dash.base + path)
        assert driver.find_elements(By.TAG_NAME, "form") == [] or all(
            f.get_attribute("method") == "get" for f in driver.find_elements(By.TAG_NAME, "form")
        )
        assert driver.find_elements(By.TAG_NAME, "button") == [] or path == "/dead"
        assert "read-only" in driver.find_element(By.CSS_SELECTOR, "header").text
    status, _ = dash.request(f"/jobs/{ref.id}/requeue", data={"csrf_token": "anything"})
    assert status == 403
    assert db.execute("select state from x_jobs where id = %s", (ref.id,)).fetchone() == ("dead",)


def test_quarantine_shows_raw_bytes_safely_and_discards_from_the_page(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path, started: list[Any]
) -> None:
    from migrate import quarantine
    from migrate.decoding import Poison

    raw = b'{"task": "<script>alert(1)</script>", "x": "\xff\xfe"}'
    quarantine.put(
        db, broker="redis://localhost:6379/9", queue="celery", fmt="redis", raw=raw, meta=None,
        poison=Poison("unknown_task", "no task <script>x</script>", task="gone.task", task_id="t-1"),
    )  # fmt: skip
    (entry_id,) = db.execute("select id from x_migrate_quarantine").fetchone()
    dash = Dashboard(dsn, tmp_path / "dash.log")
    started.append(dash)
    driver = browser()
    started.append(driver)
    from selenium.webdriver.common.by import By

    driver.get(f"{dash.base}/quarantine")
    assert "unknown_task 1" in driver.find_element(By.TAG_NAME, "main").text
    driver.get(f"{dash.base}/quarantine/{entry_id}")
    text = driver.find_element(By.TAG_NAME, "main").text
    assert '"<script>alert(1)</script>"' in text and "\\xff\\xfe" in text
    assert "no task <script>x</script>" in text
    assert driver.find_elements(By.TAG_NAME, "script") == []
    screenshot(driver, "quarantine-entry")
    driver.find_element(By.XPATH, "//button[text()='Discard']").click()
    wait_for(lambda: "?done=discarded" in driver.current_url, timeout=30, what="the discard")
    row = db.execute("select resolution from x_migrate_quarantine where id = %s", (entry_id,))
    assert row.fetchone() == ("discarded",)


def test_a_celery_task_is_found_by_its_task_id_and_shows_its_chain(
    dsn: str, tmp_path: Path, started: list[Any]
) -> None:
    from apps.celery_harness import bound
    from apps.celery_tasks import add, mul

    with bound(add.app, dsn):
        result = (add.s(1, 2) | mul.s(10)).apply_async()
    first = result.parent
    dash = Dashboard(dsn, tmp_path / "dash.log")
    started.append(dash)
    status, page = dash.request(f"/jobs/{first.id}")
    assert status == 200
    assert f"<dd>{first.id}</dd>" in page and "PENDING (no result stored yet)" in page
    assert f'href="/jobs/{result.id}">next in chain: {mul.name} {result.id}</a>' in page
    status, listing = dash.request(f"/jobs?task_id={first.id}")
    assert status == 200 and listing.count('<td class="id">') == 1
