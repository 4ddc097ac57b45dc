"""The dashboard's actions (POST only): requeue, cancel or discard one job; requeue or discard
every dead letter a filter matches.

Why it exists: an operator steers from the page they are reading. Every action is refused
unless the request carries this server's CSRF token, and always under ``--read-only``
(``site.action_allowed``); a database role without the operator duty is refused too (403,
naming ``db grant --operator``). Each does exactly what the CLI's action does (``jobs/operator.py``, also
the Django admin's actions), then redirects back (303) with what it did in the address, so a reload never repeats it.

What it is not: the pages (``pages.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode
from uuid import UUID

import psycopg
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ujobs_bridge._internal.dashboard.pages import BadFilter, checked_text
from ujobs_bridge._internal.db import bulk
from ujobs_bridge._internal.jobs import operator, validation
from ujobs_bridge._internal.observe.introspect import name_pattern
from ujobs_bridge.errors import ConfigError

if TYPE_CHECKING:
    from ujobs_bridge._internal.dashboard.site import DashboardSite

CANCEL_ERROR = "UJ_JOB_CANCELLED: cancelled from the dashboard"
NOT_AN_OPERATOR = (
    "the dashboard's database role may not act on jobs: start the dashboard with --read-only, "
    "or have the schema owner run `ujobs-bridge db grant --operator ROLE` for its role\n"
)


def routes(site: DashboardSite) -> list[BaseRoute]:
    def back(path: str, note: str) -> Response:
        return RedirectResponse(site.url(path) + "?" + urlencode({"done": note}), 303)

    async def one(request: Request) -> Response:
        form = await request.form()
        refused: Response | None = site.action_allowed(request, form)
        if refused is not None:
            return refused
        action = request.path_params["action"]
        try:
            job_id = UUID(request.path_params["job_id"])
        except ValueError:
            return PlainTextResponse("not a job id\n", 400)
        where = bulk.JobFilter(ids=[job_id])
        with site.connect() as conn:
            try:
                changed = _act(conn, action, where, site.config.clock.sql_now())
            except psycopg.errors.UniqueViolation:
                return back(f"/jobs/{job_id}", "not requeued: a live job holds its key")
            except psycopg.errors.InsufficientPrivilege:
                return PlainTextResponse(NOT_AN_OPERATOR, 403)
        if changed is None:
            return PlainTextResponse(f"unknown action {action!r}\n", 404)
        if action == "discard" and changed:
            return back("/dead", "discarded 1 dead letter")
        verb = {"requeue": "requeued", "cancel": "cancelled", "discard": "discarded"}[action]
        note = f"{verb} this job" if changed else f"not {verb}: its state does not allow it"
        return back(f"/jobs/{job_id}", note)

    async def matching(request: Request) -> Response:
        form = await request.form()
        refused: Response | None = site.action_allowed(request, form)
        if refused is not None:
            return refused
        action = request.path_params["action"]
        if action not in ("requeue", "discard"):
            return PlainTextResponse(f"unknown action {action!r}\n", 404)
        queue = str(form.get("queue") or "").strip() or None
        name = str(form.get("name") or "").strip() or None
        try:
            if queue is not None:
                validation.queue_name(queue)
            if name is not None:
                checked_text("name", name)
        except (ConfigError, BadFilter) as exc:
            reason = exc.message if isinstance(exc, ConfigError) else str(exc)
            return PlainTextResponse(f"{reason}\n", 400)
        where = bulk.JobFilter(state="dead", queue=queue, name_like=name_pattern(name))
        with site.connect() as conn:
            try:
                changed = _act(conn, action, where, site.config.clock.sql_now())
            except psycopg.errors.InsufficientPrivilege:
                return PlainTextResponse(NOT_AN_OPERATOR, 403)
        verb = "requeued" if action == "requeue" else "discarded"
        return back("/dead", f"{verb} {changed} dead letter(s)")

    return [
        Route("/jobs/{job_id}/{action}", one, methods=["POST"]),
        Route("/dead/{action}", matching, methods=["POST"]),
    ]


def _act(conn: psycopg.Connection[Any], action: str, where: bulk.JobFilter, now: Any) -> int | None:
    return operator.act(conn, action, where, now, cancel_error=CANCEL_ERROR)
