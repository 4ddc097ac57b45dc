"""The running dashboard that every page, action and panel is given: ``DashboardSite``.

Why it exists: pages (``pages.py``), actions (``actions.py``) and plugin panels render with the
same templates, read through the same connection pool and check a POST by the same rules. The
application (``app.py``) builds one site and passes it to each of them; they import its type
from here, not the application that composes them.

What it is not: the routes or the request guard (``app.py``), nor the safety rules themselves
(``security.py``).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import jinja2
import psycopg
from prometheus_client import CollectorRegistry
from psycopg_pool import ConnectionPool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.templating import Jinja2Templates

from ujobs_bridge._internal.dashboard import security
from ujobs_bridge._internal.dashboard.config import DashboardConfig
from ujobs_bridge._internal.dashboard.panels import Panel
from ujobs_bridge._internal.db import connections
from ujobs_bridge._internal.observe.introspect import attempt_text
from ujobs_bridge._internal.observe.metrics_db import DatabaseCollector
from ujobs_bridge._internal.observe.redaction import redact_message

DASHBOARD_ROLE = connections.Role("dashboard")
TEMPLATES = Path(__file__).parent / "templates"


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
        env.globals["attempt_text"] = attempt_text
        env.filters["redacted"] = lambda v: redact_message(v) if isinstance(v, str) else v
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
            session = request.scope.get(security.SESSION_SCOPE_KEY)
            if session is not None and session.started is security.Started.EXPIRED:
                return PlainTextResponse(
                    "your dashboard session expired (idle too long, or past its maximum age): "
                    "reload the page and act again\n",
                    403,
                )
            return PlainTextResponse("missing or wrong CSRF token: reload the page\n", 403)
        return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
