"""migrate's part of the dashboard: the quarantine (list, one entry's raw bytes shown safely,
retry, discard).

Why it exists: during a cutover the operator reviews poison messages where they watch the jobs;
the engine cannot read migrate's table, so migrate contributes these pages through the
``ujobs_bridge.dashboard`` entry point. Raw bytes are shown as an escaped text preview and a
hex dump (never decoded with anything but UTF-8 with escapes), secret-looking values hidden as
in job arguments (``redacted.py``); retry decodes the stored bytes with the ``-A`` app's
accepted serializers and never with pickle. A database role without the duty an action needs
is answered 403 naming the grant (an operator discards; a retry enqueues, as a worker does).

What it is not: the quarantine's rules (``quarantine.py``, ``batch.retry_entry``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from celery_compat.cli.app_option import app_for_command
from migrate import quarantine as store
from migrate import redacted
from migrate.appinfo import AppInfo
from migrate.batch import Context, retry_entry
from migrate.decoding import Accept
from migrate.defaults import DEFAULT_MAX_BYTES
from ujobs_bridge.ext.dashboard import JobSection, Site
from ujobs_bridge.ext.observe import redact_text
from ujobs_bridge.records import JobRecord

PREVIEW_BYTES = 4096
NOT_AN_OPERATOR = (
    "the dashboard's database role may not resolve quarantine entries: have the schema owner "
    "run `ujobs-bridge db grant --operator ROLE` (discard) or `--worker ROLE` (retry) for it\n"
)
HEX_BYTES = 512


def hex_dump(raw: bytes) -> str:
    lines = []
    for offset in range(0, min(len(raw), HEX_BYTES), 16):
        chunk = raw[offset : offset + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {chunk.hex(' '):<47}  {text}")
    return "\n".join(lines)


class QuarantinePanel:
    nav: tuple[str, str] | None = ("Quarantine", "/quarantine")
    templates: Path | None = Path(__file__).parent / "templates"

    def job_sections(self, conn: psycopg.Connection[Any], record: JobRecord) -> list[JobSection]:
        return []

    def routes(self, site: Site) -> list[BaseRoute]:
        def listing(request: Request) -> Response:
            include = request.query_params.get("all") == "1"
            with site.connect() as conn:
                found = store.entries(conn, include_resolved=include, limit=200)
                counts = store.open_counts(conn)
            return site.render(
                request, "quarantine.html", {"entries": found, "counts": counts, "all": include}
            )

        def entry(request: Request) -> Response:
            entry_id = request.path_params["entry_id"]
            with site.connect() as conn:
                stored = store.get(conn, entry_id)
            if stored is None:
                return PlainTextResponse(f"no quarantine entry {entry_id}\n", 404)
            shown = redacted.raw_bytes(stored.raw)  # secrets hidden, as in job arguments
            return site.render(
                request,
                "quarantine_entry.html",
                {
                    "stored": stored,
                    "detail": redact_text(stored.entry.detail or ""),
                    "redacted": shown != stored.raw,
                    "preview": shown[:PREVIEW_BYTES].decode("utf-8", "backslashreplace"),
                    "hexdump": hex_dump(shown),
                    "can_retry": site.config.app_spec is not None,
                },
            )

        async def act(request: Request) -> Response:
            form = await request.form()
            refused = site.action_allowed(request, form)
            if refused is not None:
                return refused
            entry_id = request.path_params["entry_id"]
            action = request.path_params["action"]
            try:
                if action == "discard":
                    with site.connect() as conn:
                        done = store.resolve(conn, entry_id, "discarded")
                    note = "discarded" if done else "already resolved"
                elif action == "retry":
                    note = _retry(site, entry_id)
                else:
                    return PlainTextResponse(f"unknown action {action!r}\n", 404)
            except psycopg.errors.InsufficientPrivilege:
                return PlainTextResponse(NOT_AN_OPERATOR, 403)
            return RedirectResponse(site.url(f"/quarantine/{entry_id}") + f"?done={note}", 303)

        return [
            Route("/quarantine", listing),
            Route("/quarantine/{entry_id:int}", entry),
            Route("/quarantine/{entry_id:int}/{action}", act, methods=["POST"]),
        ]


def _retry(site: Site, entry_id: int) -> str:
    """Decode again with the ``-A`` app's accepted serializers (never pickle)."""
    if site.config.app_spec is None:
        return "start the dashboard with -A (the Celery app) to retry"
    info = AppInfo.from_app(app_for_command(site.config.app_spec))
    accept = Accept.parse(
        list(info.accept_content), pickle=False, max_bytes=DEFAULT_MAX_BYTES, strict=False
    )
    with site.connect() as conn:
        stored = store.get(conn, entry_id)
        if stored is None:
            return "no such entry"
        outcome = retry_entry(
            conn, entry_id, Context(info, accept, stored.entry.broker, stored.entry.format)
        )
    if outcome is None:
        return "already resolved"
    if outcome.ok:
        return "retried: already a job" if outcome.duplicate else f"retried: job {outcome.job_id}"
    assert outcome.poison is not None
    return f"still quarantined: {outcome.poison.reason}"


def panel() -> QuarantinePanel:
    return QuarantinePanel()
