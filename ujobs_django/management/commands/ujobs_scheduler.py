"""``python manage.py ujobs_scheduler``: the bridge's leader-elected scheduler for a Django
project, on the database Django's settings name: the engine ``task()``s declared in the scanned
task modules, the retention sweep and the outbox relay, exactly as ``ujobs-bridge scheduler``
runs them. Run one or many: one leads, the others wait to take over. With ``django_celery_beat``
installed it also fires django-celery-beat's ``PeriodicTask`` rows, live (admin edits apply at
the next round), through the project's celery_compat app: no ``-A``, no DSN.

What it is not: django-celery-beat's beat (which may run beside it during a hand-over with
``celery_compat.beat.django_scheduler:DatabaseScheduler``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ujobs_bridge.ext.cli import log_level, serve_scheduler, setup_logging
from ujobs_bridge.ext.scheduling import DEFAULT_INTERVAL_S
from ujobs_django.management.commands._running import project_app, serve_in_click


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run the ujobs-bridge scheduler (periodic tasks, retention, outbox) for this project."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval", type=float, default=DEFAULT_INTERVAL_S, help="Seconds between rounds."
        )
        parser.add_argument("-l", "--loglevel", default="INFO", help="Log level.")

    def handle(self, *args: Any, **options: Any) -> None:
        app = project_app(beat=True)
        setup_logging(log_level(options["loglevel"]), None)
        interval = options["interval"]
        serve_in_click(
            "ujobs_scheduler",
            {"interval_s": interval},
            lambda: serve_scheduler(app, interval_s=interval),
        )
