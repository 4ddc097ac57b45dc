"""The seam through which packages above the engine add to the dashboard: pages of their own
(migrate's quarantine) and sections on a job's page (celery_compat's task state and chain).

Why it exists: the engine must not import celery_compat or migrate, yet the dashboard should
show a Celery task's state and a migrate quarantine. Each package declares a factory under the
``ujobs_bridge.dashboard`` entry-point group (``plugins.py``); the app loads them at start.

What it is not: a template or routing framework: a panel gets the site (to render, connect and
check CSRF tokens) and returns Starlette routes and plain-text sections.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from ujobs_bridge._internal.config import plugins
from ujobs_bridge._internal.dashboard.config import DashboardConfig
from ujobs_bridge.records import JobRecord


@dataclass(frozen=True)
class JobSection:
    """A block on a job's page: rows of (label, text), and links to other jobs (label, path
    under the dashboard, e.g. ``/jobs?task_id=...``). Everything is rendered as text."""

    title: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)


class Site(Protocol):
    """What a panel may use of the running dashboard."""

    config: DashboardConfig

    def render(self, request: Request, template: str, context: dict[str, Any]) -> Response: ...

    def connect(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    def action_allowed(self, request: Request, form: Any) -> Response | None: ...

    def url(self, path: str) -> str: ...


class Panel(Protocol):
    """``nav``: (label, path) for the top bar, or None. ``templates``: a folder of its own
    templates (they may extend ``base.html``)."""

    nav: tuple[str, str] | None
    templates: Path | None

    def routes(self, site: Site) -> list[BaseRoute]: ...

    def job_sections(
        self, conn: psycopg.Connection[Any], record: JobRecord
    ) -> list[JobSection]: ...


def load_panels() -> list[Panel]:
    """Every installed panel (a factory per entry point), in entry-point name order."""
    found: list[Panel] = []
    for _, factory in plugins.load_all(plugins.DASHBOARD_GROUP):
        make: Callable[[], Panel] = factory
        found.append(make())
    return found
