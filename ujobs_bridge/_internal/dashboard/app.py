"""The dashboard's Starlette application: routes, the guard every request passes, rendering.

Why it exists: one place composes the pages (``pages.py``), the actions (``actions.py``), the
plugin panels (``panels.py``), ``/metrics`` and the health probes, under ``--url-prefix``, with
the safety rules (``security.py``) applied to every request and strict response headers (a
Content-Security-Policy that allows no script at all: a value that slipped past escaping still
could not run).

What it is not: the server (uvicorn, started by ``cli/dashboard.py``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import jinja2
import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from psycopg_pool import ConnectionPool
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.templating import Jinja2Templates

from ujobs_bridge._internal.dashboard import actions, pages, security
from ujobs_bridge._internal.dashboard.config import DashboardConfig
from ujobs_bridge._internal.dashboard.panels import Panel, load_panels
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.observe import health
from ujobs_bridge._internal.observe.metrics_db import DatabaseCollector

DASHBOARD_ROLE = connections.Role("dashboard")
TEMPLATES = Path(__file__).parent / "templates"
OPEN_PATHS = ("/healthz", "/readyz")  # probes answer without credentials (they reveal nothing)
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class DashboardSite:
    """The running dashboard: its settings, its connection pool, its templates and panels."""

    def __init__(self, config: DashboardConfig, panels: list[Panel]) -> None:
        self.config = config
        self.panels = panels
        folders = [str(TEMPLATES)] + [str(p.templates) for p in panels if p.templates]
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(folders),
            autoescape=True,  # every value is escaped unless a template says otherwise (none do)
            undefined=jinja2.StrictUndefined,
        )
        env.globals["url"] = self.url
        env.globals["nav_extra"] = [p.nav for p in panels if p.nav]
        env.globals["read_only"] = config.read_only
        env.filters["pretty"] = lambda v: json.dumps(v, indent=2, default=str, ensure_ascii=False)
        self.templates = Jinja2Templates(env=env)
        self._pool: ConnectionPool[Any] | None = None
        self.registry = CollectorRegistry()
        self.registry.register(DatabaseCollector(config.dsn, clock=config.clock))

    def url(self, path: str) -> str:
        return self.config.url_prefix + path

    def pool(self) -> ConnectionPool[Any]:
        if self._pool is None:
            self._pool = connections.pool(self.config.dsn, DASHBOARD_ROLE, min_size=1, max_size=4)
        return self._pool

    def connect(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A pooled connection for one request: ``with site.connect() as conn``."""
        return self.pool().connection()

    def render(self, request: Request, template: str, context: dict[str, Any]) -> Response:
        context = {"csrf": security.csrf_token(self.config, request), **context}
        return self.templates.TemplateResponse(request, template, context)

    def action_allowed(self, request: Request, form: Any) -> Response | None:
        """None if this POST may act; otherwise the refusal to send."""
        if self.config.read_only:
            return PlainTextResponse("the dashboard is read-only (--read-only)\n", 403)
        if not security.csrf_valid(self.config, request, form.get(security.CSRF_FIELD)):
            return PlainTextResponse("missing or wrong CSRF token: reload the page\n", 403)
        return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


class Guard(BaseHTTPMiddleware):
    def __init__(self, app: Any, site: DashboardSite) -> None:
        super().__init__(app)
        self.site = site

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        path = request.url.path.removeprefix(self.site.config.url_prefix)
        if path not in OPEN_PATHS and not security.authorized(self.site.config, request):
            response: Response = PlainTextResponse(
                "credentials required\n",
                401,
                headers={"WWW-Authenticate": 'Basic realm="ujobs-bridge", charset="UTF-8"'},
            )
        else:
            response = await call_next(request)
        for key, value in HEADERS.items():
            response.headers.setdefault(key, value)
        return response


def _probes(site: DashboardSite) -> list[BaseRoute]:
    def metrics(request: Request) -> Response:
        return Response(generate_latest(site.registry), media_type=CONTENT_TYPE_LATEST)

    def healthz(request: Request) -> Response:
        return Response('{"ok": true}\n', media_type="application/json")

    def readyz(request: Request) -> Response:
        database = health.database_reachable(site.config.dsn)
        body = json.dumps({"ok": database.ok, "database": database.detail}) + "\n"
        return Response(body, 200 if database.ok else 503, media_type="application/json")

    return [
        Route("/metrics", metrics),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
    ]


def create_app(config: DashboardConfig, *, panels: list[Panel] | None = None) -> Starlette:
    """The dashboard for ``config``; ``panels`` default to the installed ones."""
    site = DashboardSite(config, load_panels() if panels is None else panels)
    routes: list[BaseRoute] = [*pages.routes(site), *actions.routes(site), *_probes(site)]
    for panel in site.panels:
        routes.extend(panel.routes(site))
    if config.url_prefix:
        routes = [Mount(config.url_prefix, routes=routes)]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        site.close()

    app = Starlette(routes=routes, middleware=[Middleware(Guard, site=site)], lifespan=lifespan)
    app.state.site = site
    return app
