"""Dashboard panels an upper package contributes (entry point ``ujobs_bridge.dashboard``): the
``Site`` a panel is built for and the ``JobSection`` it adds to a job's page.

Why it is a module of its own: panels need Starlette (the ``dashboard`` extra); only the
dashboard's entry point imports this, never a worker or a send.

What it is not: the dashboard application (the engine's, internal).
"""

from __future__ import annotations

from ujobs_bridge._internal.dashboard.panels import JobSection, Site

__all__ = ["JobSection", "Site"]
