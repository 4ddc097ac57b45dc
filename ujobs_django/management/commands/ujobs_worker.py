"""``python manage.py ujobs_worker``: the bridge worker for the project's ``django.tasks``
tasks, on the database Django's settings name (no ``-A``, no DSN of its own).

It runs the tasks of every ``UjobsTaskBackend`` in ``settings.TASKS`` (found in each installed
app's ``tasks.py`` and the backend's ``OPTIONS["MODULES"]``), consuming the backends' ``QUEUES``
and the tasks' queues unless ``-Q`` names others. SIGTERM (or Ctrl-C) stops it as it stops
``ujobs-bridge worker``: no new claims, running tasks finish within ``--shutdown-timeout``, the
rest handed back uncounted, exit 0.

What it is not: Celery's worker (a Celery project keeps ``ujobs-bridge worker -A proj``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ujobs_bridge.ext.cli import WorkerFlags, log_level, serve_worker, setup_logging
from ujobs_django.management.commands._running import project_app, serve_in_click

DEFAULT_SHUTDOWN_S = 30.0


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run the ujobs-bridge worker for this project's django.tasks tasks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-Q", "--queues", help="Comma-separated queues (default: all).")
        parser.add_argument("-c", "--concurrency", type=int, help="Task bodies at once.")
        parser.add_argument("-l", "--loglevel", default="INFO", help="Log level.")
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=DEFAULT_SHUTDOWN_S,
            help="Seconds running tasks get after SIGTERM before they are handed back.",
        )
        parser.add_argument(
            "-B", "--beat", action="store_true", help="Also run the scheduler in this process."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        app = project_app()
        queues = options.get("queues")
        flags = WorkerFlags(
            queues=tuple(q for q in queues.split(",") if q) if queues else app.queues(),
            concurrency=options.get("concurrency"),
            loglevel=log_level(options["loglevel"]),
            shutdown_s=options["shutdown_timeout"],
            beat=bool(options.get("beat")),
        )
        setup_logging(flags.loglevel, None)
        params = {"queues": queues, "concurrency": flags.concurrency, "beat": flags.beat}
        serve_in_click("ujobs_worker", params, lambda: serve_worker(app, None, flags))
