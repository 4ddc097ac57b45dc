"""The dashboard's Starlette application: routes, the guard every request passes, rendering.

Why it exists: one place composes the pages (``pages.py``), the actions (``actions.py``), the
plugin panels (``panels.py``), ``/metrics`` and the health probes around one ``DashboardSite``
(``site.py``), under ``--url-prefix``, with
the safety rules (``security.py``) applied to every request and strict response headers (a
Content-Security-Policy that allows no script at all: a value that slipped past escaping still
could not run).

What it is not: the server (uvicorn, started by ``cli/dashboard.py``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from ujobs_bridge._internal.dashboard import actions, pages, security
from ujobs_bridge._internal.dashboard.config import DashboardConfig
from ujobs_bridge._internal.dashboard.panels import Panel, load_panels
from ujobs_bridge._internal.dashboard.site import DashboardSite
from ujobs_bridge._internal.observe import health

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


class Guard(BaseHTTPMiddleware):
    def __init__(self, app: Any, site: DashboardSite) -> None:
        super().__init__(app)
        self.site = site

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        config = self.site.config
        path = request.url.path.removeprefix(config.url_prefix)
        response: Response
        if path in OPEN_PATHS:
            response = await call_next(request)
        elif not security.host_allowed(config, request):
            host = request.headers.get("host", "")
            response = PlainTextResponse(
                f"host {host!r} is not allowed: start the dashboard with --allowed-host "
                "NAME for each name it is reached by\n",
                400,
            )
        elif request.method not in security.SAFE_METHODS and not security.same_origin(request):
            response = PlainTextResponse(
                "cross-origin request refused: an action must come from this dashboard's own "
                "page (its Origin or Referer names another host, or is missing)\n",
                403,
            )
        elif not security.authorized(config, request):
            response = PlainTextResponse(
                "credentials required\n",
                401,
                headers={"WWW-Authenticate": 'Basic realm="ujobs-bridge", charset="UTF-8"'},
            )
        else:
            session = security.session_of(config, request)
            request.scope[security.SESSION_SCOPE_KEY] = session
            response = await call_next(request)
            if security.session_cookie_due(request, session):
                response.set_cookie(
                    security.session_cookie(request),
                    session.cookie(config, request),
                    max_age=session.max_age(config),
                    path=config.url_prefix or "/",
                    secure=request.url.scheme == "https",
                    httponly=True,
                    samesite="strict",
                )
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
