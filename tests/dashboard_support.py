"""The dashboard as a real server (``ujobs-bridge dashboard`` subprocess on a free port, or
``InProcessDashboard``: the app served by uvicorn in a thread of the test, for a config the
command cannot make, such as an injected clock) and a real headless Chromium driving it
(Debian's ``chromium`` and ``chromium-driver``), for ``test_dashboard*.py`` and the role tests.
Screenshots go to ``artifacts/dashboard/`` (ignored by git)."""

from __future__ import annotations

import base64
import shutil
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from cli_proc import CliProc

from conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Dashboard:
    def __init__(self, dsn: str, log: Path, *flags: str) -> None:
        self.port = free_port()
        self.proc = CliProc(["dashboard", "--port", str(self.port), *flags, "--dsn", dsn], log)
        self.base = f"http://127.0.0.1:{self.port}"
        self.cookies: dict[str, str] = {}  # what a browser would send back
        self.set_cookies: list[str] = []  # every Set-Cookie header seen, as sent
        wait_for(
            lambda: self.request("/healthz")[0] == 200 or self.proc.proc.poll() is not None,
            timeout=60,
            what="the dashboard to answer",
        )
        assert self.proc.proc.poll() is None, self.proc.output()

    def request(
        self,
        path: str,
        *,
        data: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """GET (or POST ``data``) as a browser of this dashboard would: it keeps the session
        cookie the dashboard sets and sends its own ``Origin`` on a POST; ``headers`` (a forged
        ``Host``, ``Origin`` or ``Cookie``) override."""
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        request = urllib.request.Request(self.base + path, data=body)
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        if self.cookies:
            request.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        if data is not None:
            request.add_header("Origin", self.base)
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=10) as response:
                self._keep_cookies(response.headers)
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            self._keep_cookies(exc.headers)
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def _keep_cookies(self, headers: Any) -> None:
        for header in headers.get_all("Set-Cookie") or []:
            cookie = SimpleCookie(header)
            self.cookies.update({k: m.value for k, m in cookie.items()})
            self.set_cookies.append(header)

    def close(self) -> None:
        self.proc.close()


def session_cookie(dash: Dashboard) -> str:
    """The name of the session cookie ``dash`` sets: one per port, as a browser keeps one jar
    per host (``security.session_cookie``)."""
    return f"ujobs_session_{dash.port}"


class InProcessDashboard:
    """``create_app`` served by uvicorn in a thread of this process (no subprocess), configured
    as ``DashboardConfig(dsn=dsn, **config)``; ``http`` is a browser of it (its cookie jar)."""

    def __init__(self, dsn: str, **config: Any) -> None:
        import uvicorn

        from ujobs_bridge._internal.dashboard.app import create_app
        from ujobs_bridge._internal.dashboard.config import DashboardConfig

        port = free_port()
        app = create_app(DashboardConfig(dsn=dsn, **config))
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.http = self.browser()
        wait_for(lambda: self.http.request("/healthz")[0] == 200, timeout=30, what="dashboard")

    def browser(self) -> Dashboard:
        """Another client of this dashboard, with its own (empty) cookie jar."""
        http = Dashboard.__new__(Dashboard)
        http.base, http.port = (
            f"http://127.0.0.1:{self.server.config.port}",
            self.server.config.port,
        )
        http.cookies, http.set_cookies = {}, []
        return http

    def get(self, path: str) -> tuple[int, str]:
        return self.http.request(path)

    def post(self, path: str, page: str) -> tuple[int, str]:
        """POST as the page ``page`` would (its session, its CSRF token)."""
        status, body = self.http.request(page)
        assert status == 200, body[:300]
        token = body.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        return self.http.request(path, data={"csrf_token": token})

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def browser(*extra_args: str) -> Any:
    if not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists():
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (.ci/run installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1360,900",
                "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(arg)
    for arg in extra_args:
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def screenshot(driver: Any, name: str) -> Path:
    """A full-height screenshot of the current page under artifacts/dashboard/NAME.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1360, max(600, min(height + 40, 2400)))
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
