"""``celery_compat.Celery``: Celery's own app class, with sending, results and control on Postgres.

Why it exists: fidelity. Subclassing ``celery.Celery`` keeps signatures, canvas, ``AsyncResult``,
configuration loading (``config_from_object(..., namespace="CELERY")``, ``autodiscover_tasks``),
``shared_task`` binding, eager mode and exceptions exactly as users know them. Only what talks
to the outside is swapped:

* sending → ``x_jobs`` (``sending.BridgeAMQP``), except task names matching
  ``ujobs_broker_tasks`` globs, which still go to the Celery broker;
* results → ``backend.PostgresBackend`` (whatever ``result_backend`` says; that backend is still
  read for a task Postgres never saw, one kept on the broker: ``backend/elsewhere.py``), except
  ``result_backend = "django-db"``: django-celery-results' ``TaskResult`` rows, written as that
  package writes them (``contrib/django/results.py``);
* ``control.revoke`` → a durable row change, remote control (``inspect``, ``broadcast``,
  ``purge``) → the Postgres mailbox and job rows (``control.BridgeControl``);
* ``celery purge`` → cancels ready messages in Postgres (``purge_command.py``).

Configuration added: ``ujobs_database_url`` (else ``UJOBS_DATABASE_URL``, else the embedded
Postgres), ``ujobs_broker_tasks`` (globs), ``ujobs_max_deliveries`` (claims before a message
whose workers keep dying is dead-lettered; default 3). Changed default: ``beat_scheduler`` is
``celery_compat.beat.scheduler:BeatScheduler`` (``celery beat`` sends the bridge scheduler's
occurrence ids) unless you set one.

What it is not: a worker. ``ujobs-bridge worker -A proj`` runs the app's tasks
(``execution.py``); so does ``celery -A proj worker``, whose ``app.Worker`` is the bridge worker
(``worker.py``), never a broker consumer; ``celery -A proj beat`` runs the bridge scheduler
(``beat_service.py``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import celery
import psycopg

from celery_compat.backend.django_db import names_django_db
from celery_compat.cli import purge as purge_command
from celery_compat.sending.send import BRIDGE_PRODUCER, BridgeProducer, conf_value
from celery_compat.sending.send_options import check_send
from ujobs_bridge.client import Client, connect

_client_lock = threading.Lock()
BEAT_SCHEDULER = "celery_compat.beat.scheduler:BeatScheduler"


def _default_beat_scheduler(sender: Any, source: Any, **_: Any) -> None:
    """Celery's built-in defaults are the last layer of ``conf`` (a copy per app): naming our beat
    scheduler there changes only what an unset ``beat_scheduler`` reads."""
    builtin = source.defaults[-1]
    for key in ("beat_scheduler", "CELERYBEAT_SCHEDULER"):
        if key in builtin:
            builtin[key] = BEAT_SCHEDULER


class Celery(celery.Celery):  # type: ignore[misc]
    """Drop-in for ``celery.Celery``: tasks are durable jobs in Postgres."""

    amqp_cls = "celery_compat.sending.send:BridgeAMQP"
    control_cls = "celery_compat.control.app_control:BridgeControl"
    backend_cls = "celery_compat.backend.postgres:PostgresBackend"

    def __init__(self, main: str | None = None, *args: Any, **kwargs: Any) -> None:
        self._ujobs_client: Client | None = kwargs.pop("ujobs_client", None)
        self._ujobs_dsn_cache: tuple[str, dict[str, Any]] | None = None
        kwargs.setdefault("broker", None)
        super().__init__(main, *args, **kwargs)
        self.on_after_configure.connect(_default_beat_scheduler, weak=False)

    # -- the jobs database ----------------------------------------------------------------------

    @property
    def ujobs_client(self) -> Client:
        """The jobs-database client (a pool), opened on first use with the schema checked (``connect``)."""
        with _client_lock:
            if self._ujobs_client is None:
                self._ujobs_client = connect(self.conf.get("ujobs_database_url") or None)
            return self._ujobs_client

    def use_ujobs_client(self, client: Client | None) -> None:
        """Point the app at an open client (tests, embedding); ``None`` forgets it."""
        with _client_lock:
            self._ujobs_client = client

    def ujobs_dsn_params(self) -> dict[str, Any] | None:
        """Connection parameters of the jobs database (opens the client on first use), so an
        enqueue inside Django's ``atomic()`` can tell whether it is on the same database."""
        dsn = self.ujobs_client.dsn
        cached = self._ujobs_dsn_cache
        if cached is None or cached[0] != dsn:
            cached = (dsn, psycopg.conninfo.conninfo_to_dict(dsn))
            self._ujobs_dsn_cache = cached
        return cached[1]

    # -- routing between Postgres and the broker -----------------------------------------------

    def goes_to_broker(self, name: str) -> bool:
        globs = conf_value(self.conf, "ujobs_broker_tasks") or ()
        if isinstance(globs, str):
            globs = [globs]
        return any(fnmatch.fnmatchcase(name, g) for g in globs)

    @contextlib.contextmanager
    def producer_or_acquire(self, producer: Any = None) -> Iterator[Any]:
        if producer is not None:
            yield producer
            return
        # Acquired for several sends (a group's): they are written together when it exits.
        with self.amqp.gathered():
            yield BRIDGE_PRODUCER

    def send_task(self, name: str, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        producer = options.get("producer")
        if self.goes_to_broker(name) and options.get("connection") is None:
            if producer is None or isinstance(producer, BridgeProducer):
                with super().producer_or_acquire(None) as real:
                    options["producer"] = real
                    return super().send_task(name, args, kwargs, **options)
        else:  # to Postgres (``BridgeAMQP.to_broker``), even when handed a broker producer
            if producer is None or isinstance(producer, BridgeProducer):
                options["producer"] = BRIDGE_PRODUCER
            check_send(name, options, datetime.now(UTC))  # before Celery adds seconds
        return super().send_task(name, args, kwargs, **options)

    # -- `celery purge` -------------------------------------------------------------------------

    def connection_for_write(self, url: Any = None, **kwargs: Any) -> Any:
        """Inside the ``celery purge`` command, a connection whose ``queue_purge`` cancels the
        ready messages of a queue in Postgres (the command purges through it); else Celery's
        broker connection (``ujobs_broker_tasks``, events)."""
        if url is None and purge_command.running():
            return purge_command.PostgresPurgeConnection(self)
        return super().connection_for_write(url, **kwargs)

    # -- `celery worker`, `celery beat` ---------------------------------------------------------

    @functools.cached_property
    def Worker(self) -> Any:
        """What ``celery -A proj worker`` builds and starts: the bridge worker (``worker.py``)."""
        return self.subclass_with_self("celery_compat.worker.command:Worker")

    @functools.cached_property
    def Beat(self) -> Any:
        """What ``celery -A proj beat`` builds and runs: the bridge scheduler, unless a scheduler
        class is named (``beat_service.py``)."""
        return self.subclass_with_self("celery_compat.beat.command:Beat")

    def _get_backend(self) -> Any:
        """Postgres, unless ``result_backend`` names django-celery-results' ``django-db``: then
        its rows (``contrib/django/results.py``), read and written as that package does."""
        if names_django_db(self.conf.result_backend):
            # optional: django-celery-results, and its models need a configured Django project
            from celery_compat.contrib.django.results import DjangoResultsBackend

            return DjangoResultsBackend(app=self, url=self.conf.result_backend)
        return super()._get_backend()

    def close(self) -> None:
        backend = self._local.__dict__.get("backend") or self._backend_cache
        if backend is not None and hasattr(backend, "close"):
            backend.close()
        super().close()
