"""What a drain and a quarantine retry read messages with: the ``-A`` app, the accepted content.

Why it exists: ``migrate`` and ``migrate quarantine retry`` decode the same messages the same
way: with the Celery app ``-A`` names (``load_app``) and ``--accept-content`` (default: the app's
``accept_content``), pickle only with ``--accept-pickle`` (``accept_from``). One module both
commands import, so neither imports the other.

What it is not: the decoding (``migrate/decoding.py``) or the app's reading (``appinfo.py``).
"""

from __future__ import annotations

from typing import Any

import click

from celery_compat.cli.app_option import app_for_command
from migrate.appinfo import AppInfo
from migrate.decoding import Accept


def load_app(app_spec: str) -> Any:
    return app_for_command(app_spec)


def accept_from(
    info: AppInfo, accept_content: str | None, accept_pickle: bool, max_bytes: int
) -> Accept:
    from_app = accept_content is None
    names = ",".join(info.accept_content) if from_app else str(accept_content)
    if (
        not from_app
        and not accept_pickle
        and "pickle" in names.lower().replace("python-serialize", "pickle")
    ):
        raise click.UsageError("pickle is accepted only with --accept-pickle (read its warning)")
    try:
        return Accept.parse(names, pickle=accept_pickle, max_bytes=max_bytes, strict=not from_app)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
