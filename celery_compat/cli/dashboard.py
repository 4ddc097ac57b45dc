"""celery_compat's part of the dashboard: a Celery message's task id, its state and result as
Celery's result backend holds them, and links to its chain: parent, root, next links, callbacks.

Why it exists: a job that is a Celery message means more to its operator as a task (the id in
the worker's logs, SUCCESS/FAILURE, the chain it belongs to); the engine's dashboard cannot read
Celery's tables, so it asks through the ``ujobs_bridge.dashboard`` entry point.

What it is not: a result decoder for untrusted formats: a stored result is shown only when it is
JSON text (the default serializer); anything else is named, never unpickled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from starlette.routing import BaseRoute

from celery_compat.db import result_store
from celery_compat.sending.message_row import from_input, is_celery_input
from ujobs_bridge.ext.dashboard import JobSection, Site
from ujobs_bridge.records import JobRecord

META_PREFIX = "celery-task-meta-"  # Celery's key/value backend key for a task's meta


class CeleryPanel:
    nav: tuple[str, str] | None = None
    templates: Path | None = None

    def routes(self, site: Site) -> list[BaseRoute]:
        return []

    def job_sections(self, conn: psycopg.Connection[Any], record: JobRecord) -> list[JobSection]:
        value = record.input
        if not is_celery_input(value):
            return []
        try:  # headers, and the embed kept inside the body's exact JSON text (message_row.py)
            message = from_input(value, queue=record.queue, job_id=record.id)
            headers, embed = message.headers, message.embed or {}
        except (ValueError, TypeError, KeyError, RecursionError):
            headers, embed = value.get("headers") or {}, {}
        if not isinstance(headers, dict):
            headers = {}
        task_id = str(headers.get("id") or "")
        rows = [("task", str(headers.get("task") or record.name)), ("task id", task_id)]
        for key in ("retries", "eta", "expires", "group", "origin"):
            if headers.get(key) not in (None, ""):
                rows.append((key, str(headers[key])))
        rows.extend(_result_rows(result_store.result_get(conn, META_PREFIX + task_id)))
        links = []
        for label, key in (("parent", "parent_id"), ("root", "root_id")):
            other = headers.get(key)
            if other and other != task_id:
                links.append((f"{label} {other}", f"/jobs/{other}"))
        for label, field in (
            ("next in chain", "chain"),
            ("callback", "callbacks"),
            ("errback", "errbacks"),
        ):
            steps = embed.get(field) or []
            ordered = list(reversed(steps)) if field == "chain" else list(steps)
            for sig in ordered:
                if isinstance(sig, dict):
                    other = (sig.get("options") or {}).get("task_id")
                    name = sig.get("task") or "?"
                    if other:
                        links.append((f"{label}: {name} {other}", f"/jobs/{other}"))
                    else:
                        rows.append((label, str(name)))
        return [JobSection("Celery", rows, links)]


def _result_rows(stored: str | None) -> list[tuple[str, str]]:
    if stored is None:
        return [("state", "PENDING (no result stored yet)")]
    try:
        meta = json.loads(stored)
    except ValueError:
        return [("state", "(stored with a non-JSON serializer: not shown)")]
    if not isinstance(meta, dict):
        return [("state", "(unrecognised result)")]
    rows = [("state", str(meta.get("status", "?")))]
    if meta.get("date_done"):
        rows.append(("done at", str(meta["date_done"])))
    if "result" in meta:
        rows.append(("result", json.dumps(meta["result"], default=str, ensure_ascii=False)))
    if meta.get("traceback"):
        rows.append(("traceback", str(meta["traceback"])))
    return rows


def panel() -> CeleryPanel:
    return CeleryPanel()
