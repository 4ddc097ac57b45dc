"""celery_compat's contributions to the ``ujobs-bridge`` command line.

Why it exists: the engine's CLI knows only engine commands; this package adds ``beat`` (entry
point ``ujobs_bridge.cli``) and the Celery part of ``demo`` (``ujobs_bridge.demo``), declared in
``pyproject.toml``.

What it is not: the engine's CLI (``ujobs_bridge/cli``), whose flags and helpers these reuse.
"""

from __future__ import annotations

from typing import Any

import click

from celery_compat.worker.loading import app_of, not_found
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.ext import loaders as loading


def app_for_command(spec: str) -> Any:
    """The Celery app ``-A spec`` names, for a command that needs one (``beat convert``,
    ``migrate``): a bad module, or no app at all, is a usage error listing where it looked."""
    try:
        target = loading.load_target(spec)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    app = app_of(target)
    if app is None:
        raise click.UsageError(not_found(spec, target))
    return app
