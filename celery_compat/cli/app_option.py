"""``app_for_command``: the Celery app a command's ``-A`` names, or a usage error.

Why it exists: ``beat convert``, ``migrate`` and the migrate dashboard panel all need the Celery
app behind ``-A`` and must fail the same way (a usage error that lists where it looked) when the
module is bad or holds no app. Kept out of ``cli/__init__.py`` so that importing one command's
module (``app.py`` imports ``cli/purge.py``) does not import the worker's loader.

What it is not: the loader itself (``celery_compat.worker.loading``), which the worker uses.
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
