"""The dashboard closed to strangers, over real HTTP and in a real headless Chromium: a request
naming a foreign ``Host`` (DNS rebinding) reads nothing, a state-changing request from another
origin acts on nothing, a CSRF token works only in the session (cookie) it was rendered for, the
session cookie is ``HttpOnly``, ``SameSite=Strict`` and ``Secure`` under TLS, ``--allowed-host``
adds a name, and blank or whitespace-only credentials are refused at start."""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from dashboard_support import Dashboard, browser, screenshot, session_cookie

from conftest import wait_for
from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge._internal.cli import cli
from ujobs_bridge.client import Client
from ujobs_bridge.testing import run_until_idle

pytestmark = pytest.mark.timeout(300)
Db = psycopg.Connection[Any]
EVIL = "evil.example"


@job(queue="guard", max_attempts=1)
def doomed() -> None:
    raise RuntimeError("dead on purpose")


@pytest.fixture
def started() -> Iterator[list[Any]]:
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        thing.quit() if hasattr(thing, "quit") else thing.close()


def _dead_jobs(dsn: str, client: Client, count: int) -> list[Any]:
    refs = [doomed.configure(client=client).enqueue() for _ in range(count)]
    run_until_idle(Worker(dsn, {doomed.name: doomed}, WorkerConfig(queues=("guard",))))
    return refs


def _state(db: Db, ref: Any) -> str | None:
    row = db.execute("select state from x_jobs where id = %s", (ref.id,)).fetchone()
    return None if row is None else str(row[0])


def _token(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page)
    assert found is not None, page[:500]
    return found.group(1)


def _another_browser(dash: Dashboard) -> Dashboard:
    """A client of the same running dashboard with its own (empty) cookie jar."""
    other = Dashboard.__new__(Dashboard)
    other.base, other.port, other.cookies, other.set_cookies = dash.base, dash.port, {}, []
    return other


def test_foreign_hosts_and_origins_are_refused_and_tokens_are_bound_to_their_session(
    dsn: str, client: Client, db: Db, tmp_path: Path, started: list[Any]
) -> None:
    ref, other = _dead_jobs(dsn, client, 2)
    dash = Dashboard(dsn, tmp_path / "dash.log", "--allowed-host", "Dash.Example:8443")
    started.append(dash)
    here = f"127.0.0.1:{dash.port}"

    # DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 reads nothing
    for path in ("/dead", "/jobs", f"/jobs/{ref.id}", "/metrics", "/"):
        status, body = dash.request(path, headers={"Host": f"{EVIL}:{dash.port}"})
        assert status == 400, (path, status)
        assert "--allowed-host" in body and "csrf_token" not in body and str(ref.id) not in body
    for host in (here, f"localhost:{dash.port}", "DASH.example"):
        assert dash.request("/dead", headers={"Host": host})[0] == 200, host
    assert dash.request("/healthz", headers={"Host": f"{EVIL}:{dash.port}"})[0] == 200

    # the session cookie: HttpOnly, SameSite=Strict, Secure only under TLS
    status, page = dash.request("/dead")
    assert status == 200
    token = _token(page)
    (cookie,) = [c for c in dash.set_cookies if c.startswith(f"{session_cookie(dash)}=")]
    attrs = {a.strip().lower() for a in cookie.split(";")}
    assert {"httponly", "samesite=strict", "path=/"} <= attrs and "secure" not in attrs
    behind_tls = _another_browser(dash)
    assert behind_tls.request("/dead", headers={"X-Forwarded-Proto": "https"})[0] == 200
    assert "secure" in {a.strip().lower() for a in behind_tls.set_cookies[0].split(";")}

    discard = f"/jobs/{ref.id}/discard"
    refused = [
        {"Host": f"{EVIL}:{dash.port}", "Origin": f"http://{EVIL}:{dash.port}"},  # rebinding
        {"Origin": f"http://{EVIL}"},  # a form on another site
        {"Origin": f"http://127.0.0.1:{dash.port + 1}"},  # another port is another origin
        {"Origin": "null"},
        {"Origin": "", "Referer": f"http://{EVIL}/page"},
    ]
    for headers in refused:
        status, _ = dash.request(discard, data={"csrf_token": token}, headers=headers)
        assert status in (400, 403), (headers, status)
    assert _state(db, ref) == "dead"

    # a POST with neither Origin nor Referer is refused too (every browser sends one)
    request = urllib.request.Request(
        dash.base + discard,
        data=urllib.parse.urlencode({"csrf_token": token}).encode(),
        headers={"Cookie": f"{session_cookie(dash)}={dash.cookies[session_cookie(dash)]}"},
    )
    with pytest.raises(urllib.error.HTTPError) as no_origin:
        urllib.request.urlopen(request, timeout=10)
    assert no_origin.value.code == 403
    assert _state(db, ref) == "dead"

    # a token from one session is refused in another, and without any session
    stranger = _another_browser(dash)
    assert stranger.request("/dead")[0] == 200
    assert stranger.cookies[session_cookie(dash)] != dash.cookies[session_cookie(dash)]
    assert stranger.request(discard, data={"csrf_token": token})[0] == 403
    assert _another_browser(dash).request(discard, data={"csrf_token": token})[0] == 403
    assert _state(db, ref) == "dead"

    # the page's own form, from its own origin, in its own session, acts
    assert dash.request(discard, data={"csrf_token": token})[0] == 303
    assert _state(db, ref) is None
    same_site_referer = {"Origin": "", "Referer": f"{dash.base}/jobs/{other.id}"}
    status, _ = dash.request(
        f"/jobs/{other.id}/requeue", data={"csrf_token": token}, headers=same_site_referer
    )
    assert status == 303 and _state(db, other) == "ready"


class _EvilSite:
    """Another origin's page: it tries to read the dashboard with ``fetch`` and posts a form
    to its discard action with a token it obtained elsewhere."""

    def __init__(self, dashboard: str, job_id: Any, token: str) -> None:
        page = f"""<!doctype html><html><head><title>evil</title></head><body>
<pre id="read">pending</pre>
<form id="f" method="post" action="{dashboard}/jobs/{job_id}/discard">
<input type="hidden" name="csrf_token" value="{token}"></form>
<script>
fetch("{dashboard}/dead", {{credentials: "include"}})
  .then(r => r.text()).then(t => {{ document.getElementById("read").textContent = "READ " + t; }})
  .catch(e => {{ document.getElementById("read").textContent = "blocked"; }});
</script></body></html>""".encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_page_from_another_origin_cannot_read_or_post_in_chromium(
    dsn: str, client: Client, db: Db, tmp_path: Path, started: list[Any]
) -> None:
    (ref,) = _dead_jobs(dsn, client, 1)
    dash = Dashboard(dsn, tmp_path / "dash.log")
    started.append(dash)
    status, page = dash.request("/dead")  # a token as any client of this dashboard gets one
    assert status == 200
    evil = _EvilSite(dash.base, ref.id, _token(page))
    started.append(evil)
    driver = browser(f"--host-resolver-rules=MAP {EVIL} 127.0.0.1")
    started.append(driver)
    from selenium.webdriver.common.by import By

    # after DNS rebinding, evil.example:PORT is the dashboard's address: it answers nothing
    driver.get(f"http://{EVIL}:{dash.port}/dead")
    body = driver.find_element(By.TAG_NAME, "body").text
    assert "is not allowed" in body and driver.find_elements(By.TAG_NAME, "form") == []
    screenshot(driver, "guard-foreign-host")

    # the operator opens another site's page while the dashboard is open in the same browser
    driver.get(f"{dash.base}/dead")
    assert driver.find_elements(By.CSS_SELECTOR, "input[name=csrf_token]")
    driver.get(f"http://{EVIL}:{evil.port}/")
    wait_for(
        lambda: driver.find_element(By.ID, "read").text != "pending",
        timeout=30,
        what="the other origin's fetch to settle",
    )
    assert driver.find_element(By.ID, "read").text == "blocked"
    driver.execute_script("document.getElementById('f').submit()")
    wait_for(
        lambda: driver.current_url.startswith(dash.base),
        timeout=30,
        what="the cross-origin form post to be answered",
    )
    assert "cross-origin request refused" in driver.find_element(By.TAG_NAME, "body").text
    screenshot(driver, "guard-cross-origin-post")
    assert _state(db, ref) == "dead"


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--address", "0.0.0.0"], {"UJOBS_DASHBOARD_TOKEN": "\n"}),
        (["--address", "0.0.0.0"], {"UJOBS_DASHBOARD_TOKEN": "   "}),
        ([], {"UJOBS_DASHBOARD_TOKEN": ""}),
        (["--address", "0.0.0.0", "--auth", "x:\n"], {}),
        (["--auth", "x: "], {}),
        (["--auth", " :pw"], {}),
    ],
)
def test_blank_or_whitespace_credentials_are_refused_at_start(
    args: list[str], env: dict[str, str]
) -> None:
    result = CliRunner().invoke(cli, ["dashboard", *args, "--dsn", "postgresql://x@127.0.0.1/x"],
                                env=env)  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "[UJ_DASHBOARD_CREDENTIALS_INVALID]" in result.output
    assert "hint:" in result.output


def _session_id(dash: Dashboard) -> str:
    return dash.cookies[session_cookie(dash)].split(".", 1)[0]


def test_sessions_expire_idle_and_at_their_maximum_age_and_rotate_on_login(
    dsn: str, client: Client, db: Db
) -> None:
    """On the dashboard's own (frozen) clock: a session ends 10 minutes after its last request
    and an hour after it began, however active; an action then is refused as expired and the
    page's reload gives a new session id and token. A session cookie made under other
    credentials (another login) or not by this server is not taken: the login gets a new id."""
    from dashboard_support import InProcessDashboard

    from ujobs_bridge import FrozenClock

    refs = _dead_jobs(dsn, client, 4)
    clock = FrozenClock(datetime(2031, 1, 1, tzinfo=UTC))
    ops = ("ops", "pw-for-ops")
    server = InProcessDashboard(
        dsn,
        credentials=ops,
        token="tok-for-robots",
        clock=clock,
        session_idle_s=600.0,
        session_max_age_s=3600.0,
    )
    try:
        dash = server.browser()

        def page() -> str:
            status, body = dash.request("/dead", auth=ops)
            assert status == 200, body[:300]
            return _token(body)

        def act(ref: Any, token: str) -> tuple[int, str]:
            return dash.request(f"/jobs/{ref.id}/discard", data={"csrf_token": token}, auth=ops)

        token = page()
        first = _session_id(dash)
        assert "max-age=600" in dash.set_cookies[-1].lower()
        assert act(refs[0], token)[0] == 303 and _state(db, refs[0]) is None

        # idle past 10 minutes: the page's token is refused, the session is replaced
        clock.advance(timedelta(minutes=10, seconds=1))
        status, body = act(refs[1], token)
        assert status == 403 and "session expired" in body, body
        assert _state(db, refs[1]) == "dead"
        assert _session_id(dash) != first
        token = page()
        second = _session_id(dash)
        assert act(refs[1], token)[0] == 303 and _state(db, refs[1]) is None

        # a request every 9 minutes keeps it alive, up to an hour after it began
        for _ in range(6):
            clock.advance(timedelta(minutes=9))
            assert dash.request("/", auth=ops)[0] == 200
            assert _session_id(dash) == second
        clock.advance(timedelta(minutes=7))  # 61 minutes after it began, 7 since the last
        status, body = act(refs[2], token)
        assert status == 403 and "session expired" in body, body
        assert _state(db, refs[2]) == "dead" and _session_id(dash) != second

        # another login (the robots' token) in the same browser: a new session id, and the
        # token of the session it replaced is refused
        token = page()
        before = _session_id(dash)
        status, body = dash.request(
            f"/jobs/{refs[2].id}/discard",
            data={"csrf_token": token},
            headers={"Authorization": "Bearer tok-for-robots"},
        )
        assert status == 403 and _state(db, refs[2]) == "dead"
        assert _session_id(dash) != before

        # a session id planted in the browser (not made by this server) is never taken
        planted = (
            dash.cookies[session_cookie(dash)].split(".", 1)[0]
            + ".1924992000.1924992000."
            + "0" * 64
        )
        dash.cookies[session_cookie(dash)] = planted
        assert dash.request("/dead", auth=ops)[0] == 200
        assert dash.cookies[session_cookie(dash)] != planted
        assert _session_id(dash) != planted.split(".", 1)[0]
    finally:
        server.close()
