"""The web dashboard: ``ujobs-bridge dashboard`` serves a read-and-steer UI on the jobs database.

Why it is a package: pages (``pages.py``), actions (``actions.py``), the safety rules every
request passes (``security.py``), the reads and chart geometry (``views.py``) and the plugin
seam through which celery_compat and migrate add their panels (``panels.py``) are separate
concerns; ``app.py`` composes them into one Starlette application. Server-rendered Jinja2 with
autoescaping, charts drawn as inline SVG, one inline stylesheet: nothing is loaded from a CDN,
and it works offline.

What it is not: a second engine. Every action calls what the CLI calls (``introspect.py``,
``db/bulk.py``); every statement lives in a ``db`` package.
"""

from __future__ import annotations

from ujobs_bridge._internal.dashboard.app import create_app
from ujobs_bridge._internal.dashboard.config import DashboardConfig

__all__ = ["DashboardConfig", "create_app"]
