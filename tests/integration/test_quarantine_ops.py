"""The migrate quarantine from the operator's side, filled by a real ``ujobs-bridge migrate``
drain of Redis: in a real headless Chromium, retry from the dashboard (a POST with its CSRF
token) makes the job a real worker then runs, discard resolves an entry, raw bytes are shown
escaped, and no action passes without the token or under ``--read-only``; and ``migrate
quarantine show`` (and the page) hide a message's secrets (kwargs named like secrets, the
argument repr, a broker URL's password in a header) as job arguments are hidden, while
``show --raw`` writes the bytes as stored."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celery
import psycopg
import pytest
import redis
from cli_proc import TESTS_DIR, CliProc
from dashboard_support import Dashboard, browser, screenshot, session_cookie
from kombu import Connection

from conftest import wait_for
from ujobs_bridge.testing import redis_url

pytestmark = pytest.mark.timeout(300)
Db = psycopg.Connection[Any]
REDIS_URL = redis_url(8)  # this module's own Redis db (of the test kit's server)
SECRETS = ("hunter2", "tok-SECRET", "key-SECRET", "brokerpw", "pwd-SECRET", "noslash-SECRET")


@pytest.fixture
def started() -> Iterator[list[Any]]:
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        if hasattr(thing, "quit"):
            thing.quit()
        else:
            thing.close()


@pytest.fixture
def queue(db: Db) -> Iterator[str]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_URL}: {exc}")
    db.execute("truncate x_migrate_quarantine")
    name = f"qops-{uuid.uuid4().hex[:10]}"
    yield name
    for key in list(client.scan_iter(match=f"*{name}*", count=1000)):
        client.delete(key)
    client.close()


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR), COLUMNS="200")
    env.pop("UJOBS_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args],
        capture_output=True,
        env=env,
        cwd=TESTS_DIR,
        timeout=120,
    )


def publish_and_drain(dsn: str, queue: str) -> dict[str, int]:
    """A task deployed later, a malformed body (and markup in its headers), and a message
    carrying secrets, published with real Celery and kombu, then drained by the real CLI into
    the quarantine; returns reason (``secrets`` for the last) -> entry id."""
    app = celery.Celery(f"producer-{queue}", broker=REDIS_URL, set_as_current=False)
    app.conf.update(task_default_queue=queue, broker_connection_retry_on_startup=True)
    try:
        app.send_task("migrate_proj.added_later", args=(7,))
        app.send_task(
            "migrate_proj.secret_thing",
            kwargs={"password": "hunter2", "token": "tok-SECRET", "api_key": "key-SECRET",
                    "pwd": "pwd-SECRET", "dsn": "postgresql//bob:noslash-SECRET@db/x",
                    "note": "fine"},
            headers={"origin_url": "redis://:brokerpw@10.0.0.1:6379/0"},
        )  # fmt: skip
        task_id = str(uuid.uuid4())
        with Connection(REDIS_URL) as conn:
            conn.Producer().publish(
                b"<script>alert(1)</script> \xff",
                routing_key=queue,
                content_type="application/json",
                content_encoding="binary",
                headers={"lang": "py", "task": "migrate_proj.record", "id": task_id,
                         "root_id": task_id, "retries": 0, "note": "<b>bold</b><script>x()</script>"},
                declare=[],
            )  # fmt: skip
    finally:
        app.close()
    out = cli("migrate", "-A", "apps.migrate_proj", "--broker", REDIS_URL, "-Q", queue,
              "--dsn", dsn, "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    listed = json.loads(cli("migrate", "quarantine", "ls", "--dsn", dsn, "--json").stdout)
    ids = {}
    for e in listed["entries"]:
        key = "secrets" if e["task"] == "migrate_proj.secret_thing" else e["reason"]
        ids[key] = e["id"]
    assert set(ids) == {"unknown_task", "malformed", "secrets"}, listed
    for secret in SECRETS:  # the listing's details are redacted too
        assert secret not in json.dumps(listed), secret
    return ids


def test_quarantine_show_hides_secrets_and_raw_writes_the_stored_bytes(
    dsn: str, db: Db, queue: str
) -> None:
    ids = publish_and_drain(dsn, queue)
    entry = str(ids["secrets"])
    table = cli("migrate", "quarantine", "show", entry, "--dsn", dsn)
    assert table.returncode == 0, table.stderr.decode()
    shown = table.stdout.decode()
    assert "***" in shown and "fine" in shown and "redis://:****@10.0.0.1" in shown
    data = json.loads(cli("migrate", "quarantine", "show", entry, "--dsn", dsn, "--json").stdout)
    as_json = json.dumps(data)
    for secret in SECRETS:
        assert secret not in shown and secret not in as_json, secret
    assert data["meta"] is None or "brokerpw" not in json.dumps(data["meta"])
    envelope = json.loads(data["raw_preview"])
    headers = envelope["headers"]
    assert headers["origin_url"] == "redis://:****@10.0.0.1:6379/0"
    assert (
        "'password': '***'" in headers["kwargsrepr"] and "'note': 'fine'" in headers["kwargsrepr"]
    )
    args, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
    assert args == []
    assert kwargs == {
        "password": "***",
        "token": "***",
        "api_key": "***",
        "pwd": "***",
        "dsn": "postgresql//bob:****@db/x",
        "note": "fine",
    }
    (stored,) = db.execute("select raw from x_migrate_quarantine where id = %s", (ids["secrets"],))
    assert data["sha256"] and len(data["raw_preview"]) > 0
    raw = cli("migrate", "quarantine", "show", entry, "--raw", "--dsn", dsn)
    assert raw.stdout == bytes(stored[0]) and b"hunter2" in raw.stdout  # the opt-in: as stored
    clean = json.loads(
        cli(
            "migrate", "quarantine", "show", str(ids["unknown_task"]), "--dsn", dsn, "--json"
        ).stdout
    )
    (plain,) = db.execute(
        "select raw from x_migrate_quarantine where id = %s", (ids["unknown_task"],)
    )
    assert clean["raw_preview"] == bytes(plain[0]).decode()  # nothing secret: bytes unchanged


def test_quarantine_retry_discard_csrf_and_read_only_from_the_dashboard(
    dsn: str, db: Db, queue: str, tmp_path: Path, started: list[Any]
) -> None:
    ids = publish_and_drain(dsn, queue)
    dash = Dashboard(dsn, tmp_path / "dash.log", "-A", "apps.migrate_proj_v2")
    started.append(dash)
    driver = browser()
    started.append(driver)
    from selenium.webdriver.common.by import By

    def entry(entry_id: int) -> tuple[Any, ...]:
        row = db.execute(
            "select resolution, job_id from x_migrate_quarantine where id = %s", (entry_id,)
        ).fetchone()
        assert row is not None
        return tuple(row)

    # Retry: the task is deployed now (-A apps.migrate_proj_v2): the job is made, then runs.
    driver.get(f"{dash.base}/quarantine/{ids['unknown_task']}")
    driver.find_element(By.XPATH, "//button[text()='Retry']").click()
    wait_for(lambda: "?done=retried" in driver.current_url, timeout=30, what="the retry")
    resolution, job_id = entry(ids["unknown_task"])
    assert resolution == "retried" and job_id is not None
    assert f"job {job_id}" in driver.find_element(By.TAG_NAME, "main").text
    screenshot(driver, "quarantine-retried")
    job = db.execute("select name, queue, state from x_jobs where id = %s", (job_id,)).fetchone()
    assert job == ("migrate_proj.added_later", queue, "ready")
    worker = CliProc(
        ["worker", "-A", "apps.migrate_proj_v2", "-Q", queue, "--poll", "0.2", "--dsn", dsn],
        tmp_path / "worker.log",
    )
    started.append(worker)
    wait_for(
        lambda: (
            db.execute("select state from x_jobs where id = %s", (job_id,)).fetchone() == ("done",)
        ),
        timeout=90,
        what="the worker to run the retried message",
    )

    # Raw bytes shown escaped; discard from the page.
    driver.get(f"{dash.base}/quarantine/{ids['malformed']}")
    text = driver.find_element(By.TAG_NAME, "main").text
    assert '"note": "<b>bold</b><script>x()</script>"' in text  # the envelope, as text
    assert driver.find_elements(By.TAG_NAME, "script") == []
    driver.find_element(By.XPATH, "//button[text()='Discard']").click()
    wait_for(lambda: "?done=discarded" in driver.current_url, timeout=30, what="the discard")
    assert entry(ids["malformed"]) == ("discarded", None)

    # Secrets hidden on the page, as in job arguments.
    secret_id = ids["secrets"]
    driver.get(f"{dash.base}/quarantine/{secret_id}")
    page = driver.page_source
    for secret in SECRETS:
        assert secret not in page, secret
    assert "redis://:****@10.0.0.1" in page and driver.find_element(By.ID, "redacted")
    screenshot(driver, "quarantine-redacted")

    # No action without the CSRF token, nor with a wrong one.
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page)
    assert token is not None
    discard = f"/quarantine/{secret_id}/discard"
    assert dash.request(discard, data={})[0] == 403
    assert dash.request(discard, data={"csrf_token": "0" * 64})[0] == 403
    assert dash.request(f"/quarantine/{secret_id}/retry", data={})[0] == 403
    assert entry(secret_id) == (None, None)

    # --read-only: no action shown, and refused even with a valid-looking token.
    ro = Dashboard(dsn, tmp_path / "ro.log", "--read-only", "-A", "apps.migrate_proj_v2")
    started.append(ro)
    driver.get(f"{ro.base}/quarantine/{secret_id}")
    assert driver.find_elements(By.TAG_NAME, "button") == []
    assert all(
        (f.get_attribute("method") or "get").lower() == "get"
        for f in driver.find_elements(By.TAG_NAME, "form")
    )
    assert ro.request(discard, data={"csrf_token": token.group(1)})[0] == 403
    assert ro.request(f"/quarantine/{secret_id}/retry", data={"csrf_token": "x"})[0] == 403
    assert entry(secret_id) == (None, None)
    dash.cookies[session_cookie(dash)] = driver.get_cookie(session_cookie(dash))["value"]
    assert dash.request(discard, data={"csrf_token": token.group(1)})[0] == 303  # the token works
    # (in the browser's session: the token is bound to its session cookie)
    assert entry(secret_id) == ("discarded", None)
