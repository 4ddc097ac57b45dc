"""The web dashboard: ``ujobs-bridge dashboard`` serves a read-and-steer UI on the jobs database.

Why it is a package: pages (``pages.py``), actions (``actions.py``), the safety rules every
request passes (``security.py``), the reads and chart geometry (``views.py``), the plugin seam
through which celery_compat and migrate add their panels (``panels.py``) and the site they are
all given (``site.py``) are separate concerns; ``app.py`` composes them into one Starlette
application. Server-rendered Jinja2 with autoescaping, charts drawn as inline SVG, one inline
stylesheet: nothing is loaded from a CDN, and it works offline.

What it is not: a second engine. Every action calls what the CLI calls (``introspect.py``,
``db/bulk.py``); every statement lives in a ``db`` package.

Imports nothing: ``cli/dashboard.py`` imports ``app.create_app`` and ``config.DashboardConfig``
themselves, so a module of the dashboard can import another without running the application.
"""
