"""``celery -A proj beat`` on a celery_compat app: runs the bridge scheduler, not Celery's beat.

Why it exists: deploy scripts say ``celery beat``. Celery's command builds ``app.Beat(...)``
(``celery/bin/beat.py``) and calls ``.run()``; a celery_compat app's ``Beat`` is this class
(``Celery.Beat``), which runs the same ``serve`` as ``ujobs-bridge scheduler -A proj``: the
app's ``beat_schedule`` as leader-elected periodic tasks in Postgres (run several; one leads),
the outbox relay and the retention sweep, on the app's ``ujobs_database_url``, until
SIGTERM/SIGINT. Celery's beat flags keep their meaning where one exists (``-l``, ``-f``,
``--pidfile``, ``--max-interval``: the seconds between rounds, ``--detach``: Celery daemonizes
before this runs); ``-s`` (beat's shelve file) and ``-n`` (the remote-control node name) are
accepted and have nothing to do here (the schedule's state is rows in Postgres);
``--enable-remote-control`` is refused with the reason.

A scheduler class named explicitly (``-S`` on the command line, or a ``beat_scheduler`` other
than celery_compat's default, such as django-celery-beat's) keeps Celery's own beat with that
class: ``-S celery_compat.beat.scheduler:BeatScheduler`` is the hand-over mode in which beat
sends the bridge scheduler's occurrence ids (``beat_scheduler.py``). django-celery-beat's
``DatabaseScheduler`` (named by ``CELERY_BEAT_SCHEDULER`` in a Django project) runs as
``celery_compat.beat.django_scheduler:DatabaseScheduler``, its hand-over form.

What it is not: the scheduler (``ujobs_bridge._internal.scheduling``) or the beat conversion (``beat.py``).
"""

from __future__ import annotations

import os
from typing import Any

import click
from click.core import ParameterSource

from celery_compat.worker.loading import CeleryApp
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.ext import cli as flags
from ujobs_bridge.ext.cli import serve_scheduler as serve
from ujobs_bridge.ext.scheduling import DEFAULT_INTERVAL_S

DEFAULT_SCHEDULER = "celery_compat.beat.scheduler:BeatScheduler"
# django-celery-beat's scheduler, named by every project that uses it, runs as the subclass that
# sends bridge occurrences (django_scheduler.py), so it can run beside the bridge scheduler.
DJANGO_BEAT = frozenset(
    {
        "django_celery_beat.schedulers:DatabaseScheduler",
        "django_celery_beat.schedulers.DatabaseScheduler",
    }
)
DJANGO_BEAT_HANDOVER = "celery_compat.beat.django_scheduler:DatabaseScheduler"


def _same_class(a: str, b: str) -> bool:
    return a.replace(":", ".") == b.replace(":", ".")


def _command_line(name: str) -> bool:
    """Was the ``celery beat`` option ``name`` given on the command line (or its env var)?"""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    source = ctx.get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def celery_beat_wanted(scheduler: Any) -> bool:
    """A scheduler class named explicitly: ``-S`` given, or ``beat_scheduler`` not ours."""
    if scheduler is None:
        return False
    if not isinstance(scheduler, str):
        return True  # a class object: only code names one
    return _command_line("scheduler") or not _same_class(scheduler, DEFAULT_SCHEDULER)


class Beat:
    """What ``app.Beat`` is on a celery_compat app (bound with ``subclass_with_self``)."""

    app: Any  # set by ``subclass_with_self``

    def __init__(
        self,
        max_interval: float | None = None,
        loglevel: Any = None,
        logfile: str | None = None,
        pidfile: str | None = None,
        scheduler: Any = None,
        **kwargs: Any,
    ) -> None:
        self.kwargs = dict(
            kwargs,
            max_interval=max_interval,
            loglevel=loglevel,
            logfile=logfile,
            pidfile=pidfile,
            scheduler=scheduler,
        )
        self.celery_beat = celery_beat_wanted(scheduler)
        if self.celery_beat:
            return
        try:
            if kwargs.get("remote_control"):
                raise ConfigError(
                    "--enable-remote-control is not supported: the bridge scheduler answers "
                    "no remote control",
                    hint="check it with `ujobs-bridge tasks ls -A ... --json` (the leader's "
                    "watermark), or run several schedulers: one leads, the others wait",
                )
            if max_interval is not None and max_interval <= 0:
                raise ConfigError(
                    f"--max-interval {max_interval} is not positive", hint="give seconds, > 0"
                )
            self.loglevel = flags.log_level(loglevel if loglevel is not None else "WARNING")
        except ConfigError as exc:
            raise click.UsageError(exc.render()) from exc
        self.interval_s = float(max_interval) if max_interval else DEFAULT_INTERVAL_S
        self.logfile = logfile
        self.pidfile = pidfile

    def run(self) -> None:
        app = self.app
        if self.celery_beat:
            # import cost: Celery's own beat loads only when it is the one asked for
            from celery.apps.beat import Beat as CeleryBeat

            kwargs = dict(self.kwargs)
            if kwargs.get("scheduler") in DJANGO_BEAT:
                kwargs["scheduler"] = DJANGO_BEAT_HANDOVER
            CeleryBeat(app=app, **kwargs).run()
            return
        # Celery's CLI has no --log-format: the bridge's environment variable sets it
        json_logs = os.environ.get("UJOBS_LOG_FORMAT") == "json"
        flags.setup_logging(self.loglevel, self.logfile, "json" if json_logs else "text")
        try:
            flags.write_pidfile(self.pidfile)
        except (ConfigError, OSError) as exc:
            message = exc.render() if isinstance(exc, ConfigError) else str(exc)
            raise click.UsageError(message) from exc
        try:
            flags.say(
                "celery beat on the bridge: the ujobs-bridge scheduler (leader-elected, "
                "occurrences in Postgres)"
            )
            app.loader.import_default_modules()
            ctx = click.get_current_context(silent=True)
            spec = ctx.find_root().params.get("app") if ctx is not None else None
            name = spec if isinstance(spec, str) else app.main or ""
            with flags.one_line_errors():  # as `ujobs-bridge scheduler` says it
                serve(CeleryApp(name, app, app), interval_s=self.interval_s)
        finally:
            flags.remove_pidfile(self.pidfile)
