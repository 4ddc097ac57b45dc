"""What both ``manage.py`` commands share: the project's tasks as the engine's app, and a click
context for the engine's serve functions (which read their command's flags from one).

What it is not: a command (the leading underscore keeps Django from listing it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click
from django.core.management.base import CommandError

from ujobs_bridge.errors import UjobsError
from ujobs_django.project import DjangoTasksApp


def project_app(*, beat: bool = False) -> DjangoTasksApp:
    """The project's ``UjobsTaskBackend`` tasks; refused when ``settings.TASKS`` has none
    (``beat``: unless django-celery-beat's rows give the scheduler something to fire)."""
    try:
        app = DjangoTasksApp(beat=beat)
    except UjobsError as exc:
        raise CommandError(exc.render()) from exc
    if not app.backends and not (beat and app.celery_app is not None):
        raise CommandError(
            "settings.TASKS names no ujobs_django.backend.UjobsTaskBackend: there is nothing "
            "to run\nhint: TASKS = {'default': {'BACKEND': "
            "'ujobs_django.backend.UjobsTaskBackend'}}"
        )
    return app


def serve_in_click(name: str, params: Mapping[str, Any], serve: Callable[[], Any]) -> None:
    """Run ``serve`` inside a click context named ``name`` holding ``params``; a usage error
    (a bad flag or setting) becomes Django's ``CommandError``."""
    with click.Context(click.Command(name), info_name=name) as context:
        context.params = dict(params)
        try:
            serve()
        except click.UsageError as exc:
            raise CommandError(exc.format_message()) from exc
        except UjobsError as exc:
            raise CommandError(exc.render()) from exc
    return None
