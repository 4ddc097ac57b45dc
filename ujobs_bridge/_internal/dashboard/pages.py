"""The dashboard's pages (GET): overview, jobs, one job (with its attempts), dead letters,
scheduled tasks, workers.

Why it exists: each page is one read of the database shaped by ``views.py`` and drawn by its
template; filters come from the query string and are validated like the CLI's flags (a bad
value is a 400 that says why, never a SQL error).

What it is not: the actions (``actions.py``) or the plugin pages (``panels.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from ujobs_bridge._internal.dashboard import views
from ujobs_bridge._internal.dashboard.panels import JobSection
from ujobs_bridge._internal.db import job_reads as reads_db
from ujobs_bridge._internal.db import nodes, observe
from ujobs_bridge._internal.db import steps as step_db
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.jobs.instants import storable_instant
from ujobs_bridge._internal.observe.introspect import (
    lookup_ids,
    name_pattern,
    parse_shown_state,
    suspended_reason,
)
from ujobs_bridge._internal.observe.redaction import REDACTED, redact, redact_message
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.records import JobRecord

if TYPE_CHECKING:
    from ujobs_bridge._internal.dashboard.site import DashboardSite

AUTO_REFRESH_S = 10


class BadFilter(Exception):
    pass


# The longest filter text taken and the largest offset: the CLI's (``validation``).
MAX_FILTER_CHARS = validation.MAX_FILTER_CHARS
MAX_OFFSET = validation.MAX_OFFSET


def checked_text(key: str, value: str) -> str:
    """``value`` when the database can compare it (no NUL, no lone surrogate, not too long);
    ``BadFilter`` saying which it is otherwise."""
    problem = validation.text_problem(value, max_length=MAX_FILTER_CHARS)
    if problem is not None:
        raise BadFilter(f"{key} {problem}: no stored value can match it")
    return value


def _text(request: Request, key: str) -> str | None:
    value = request.query_params.get(key, "").strip()
    return checked_text(key, value) if value else None


def _int(request: Request, key: str, default: int) -> int:
    raw = _text(request, key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise BadFilter(f"{key} must be a whole number, not {raw[:80]!r}") from exc
    if value < 0:
        raise BadFilter(f"{key} must not be negative")
    if value > MAX_OFFSET:
        raise BadFilter(f"{key} must be at most {MAX_OFFSET}")
    return value


def _parsed_instant(key: str, raw: str) -> datetime:
    """An ISO 8601 time a row's instants can be compared with (aware, in years 1..9999 once in
    UTC); ``BadFilter`` naming the key otherwise. A naive time is the server's local time."""
    try:
        value = datetime.fromisoformat(raw)
        return storable_instant(value if value.tzinfo else value.astimezone(), key)
    except (ValueError, OverflowError) as exc:
        raise BadFilter(
            f"{key} must be an ISO 8601 time (2026-12-01T09:00) within years 1..9999, "
            f"not {raw[:80]!r}"
        ) from exc


def _instant(request: Request, key: str) -> datetime | None:
    raw = _text(request, key)
    return None if raw is None else _parsed_instant(key, raw)


def _filters(request: Request) -> dict[str, Any]:
    try:
        state, kind = parse_shown_state(_text(request, "state"))
        queue = _text(request, "queue")
        if queue is not None:
            validation.queue_name(queue)
    except ConfigError as exc:
        raise BadFilter(exc.message) from exc
    return {
        "state": state,
        "kind": kind,
        "queue": queue,
        "name": _text(request, "name"),
        "task_id": _text(request, "task_id"),
        "since": _instant(request, "since"),
        "until": _instant(request, "until"),
        "offset": _int(request, "offset", 0),
        "before": _key(request, "before"),
    }


def _key(request: Request, key: str) -> tuple[datetime, UUID] | None:
    """A page key: the created_at and id of the last row of the previous page, as
    ``ISO-TIME,UUID`` (what the "older" link carries)."""
    raw = _text(request, key)
    if raw is None:
        return None
    at, _, job_id = raw.rpartition(",")
    try:
        return _parsed_instant(key, at), UUID(job_id)
    except (BadFilter, ValueError) as exc:
        raise BadFilter(
            f"{key} must be ISO-TIME,UUID (the older link's), not {raw[:120]!r}"
        ) from exc


def routes(site: DashboardSite) -> list[BaseRoute]:
    config = site.config

    def guarded(handler: Any) -> Any:
        def endpoint(request: Request) -> Response:
            try:
                response: Response = handler(request)
                return response
            except BadFilter as exc:
                return PlainTextResponse(f"{exc}\n", 400)

        return endpoint

    def overview(request: Request) -> Response:
        now = config.clock.now()
        with site.connect() as conn:
            queues = views.queue_rows(conn, config.clock.sql_now())
            chart = views.chart(conn, now)
            latency = views.latency_chart(conn, now)
        ages = {
            q.queue: views.age_text((now - q.oldest_due).total_seconds()) if q.oldest_due else "-"
            for q in queues
        }
        return site.render(
            request,
            "overview.html",
            {
                "queues": queues,
                "ages": ages,
                "chart": chart,
                "latency": latency,
                "latency_text": views.latency_text,
                "refresh": AUTO_REFRESH_S,
            },
        )

    def jobs_page(request: Request) -> Response:
        f = _filters(request)
        size = config.page_size
        with site.connect() as conn:
            ids = lookup_ids(conn, f["task_id"]) if f["task_id"] else None
            records = reads_db.job_list(
                conn,
                state=f["state"].value if f["state"] else None,
                kind=f["kind"],
                queue=f["queue"],
                name=None,
                name_like=name_pattern(f["name"]),
                ids=ids,
                since=f["since"],
                until=f["until"],
                before=f["before"],
                limit=size,
                offset=f["offset"],
            )
        listing = _listing(request, records, f["offset"], size)
        listing["filters"].pop("before", None)
        listing["older"] = (
            f"{records[-1].created_at.isoformat()},{records[-1].id}"
            if len(records) == size
            else None
        )
        listing["paged"] = f["before"] is not None or f["offset"] > 0
        return site.render(request, "jobs.html", listing)

    def dead_page(request: Request) -> Response:
        f = _filters(request)
        size = config.page_size
        with site.connect() as conn:
            records = reads_db.job_dead(
                conn,
                limit=size,
                offset=f["offset"],
                queue=f["queue"],
                name_like=name_pattern(f["name"]),
            )
        return site.render(request, "dead.html", _listing(request, records, f["offset"], size))

    def job_page(request: Request) -> Response:
        key = checked_text("the job id or task id", request.path_params["job_id"])
        with site.connect() as conn:
            record = _find(conn, key)
            if record is None:
                return site.render(request, "missing.html", {"key": key})
            steps = step_db.step_list(conn, record.id)
            attempts = observe.observe_attempts(conn, record.id)
            sections: list[JobSection] = []
            for panel in site.panels:
                sections.extend(panel.job_sections(conn, record))
        waits = [s for s in steps if s.event is not None]
        return site.render(
            request,
            "job.html",
            {
                "job": record,
                "input": redact(record.input),
                "output": redact(record.output),
                "redacted": REDACTED,
                "steps": steps,
                "attempts": attempts,
                "waits": waits,
                "suspended": suspended_reason(record, steps),
                "sections": sections,
            },
        )

    def scheduled_page(request: Request) -> Response:
        with site.connect() as conn:
            rows, leader = views.task_rows(conn, config.tasks, config.clock.now())
        return site.render(request, "scheduled.html", {"tasks": rows, "leader": leader})

    def workers_page(request: Request) -> Response:
        now = config.clock.now()
        with site.connect() as conn:
            found = nodes.nodes_live(conn, config.clock.sql_now())
        rows = [
            {
                "node": n,
                "active": n.info.get("active", "-"),
                "processed": sum(
                    v for v in (n.info.get("processed") or {}).values() if isinstance(v, int)
                ),
                "beat": views.age_text((now - n.heartbeat_at).total_seconds()),
                "up": views.age_text((now - n.started_at).total_seconds()),
            }
            for n in found
        ]
        return site.render(request, "workers.html", {"workers": rows})

    return [
        Route("/", guarded(overview)),
        Route("/jobs", guarded(jobs_page)),
        Route("/jobs/{job_id}", guarded(job_page)),
        Route("/dead", guarded(dead_page)),
        Route("/scheduled", guarded(scheduled_page)),
        Route("/workers", guarded(workers_page)),
    ]


def _find(conn: Any, key: str) -> JobRecord | None:
    """A job by its id, else by a Celery task id (its newest message)."""
    try:
        record = reads_db.job_get(conn, UUID(key))
    except ValueError:
        record = None
    if record is not None:
        return record
    for job_id in lookup_ids(conn, key):
        found = reads_db.job_get(conn, job_id)
        if found is not None:
            return found
    return None


def _listing(request: Request, records: list[JobRecord], offset: int, size: int) -> dict[str, Any]:
    params = {k: v for k, v in request.query_params.items() if k != "offset" and v}
    return {
        "jobs": records,
        "filters": params,
        "offset": offset,
        "next_offset": offset + size if len(records) == size else None,
        "prev_offset": max(0, offset - size) if offset else None,
        "last_error": lambda r: (
            redact_message(r.last_error or "").strip().splitlines()[-1:] or [""]
        ),
    }
