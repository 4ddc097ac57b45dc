"""A plain ``celery.Celery`` app under the bridge is adopted: its sends and results go to Postgres.

Why it exists: ``ujobs-bridge worker -A proj`` runs a plain Celery app's drained messages (from
``ujobs-bridge migrate``), but what those tasks send next (chain steps, ``link`` callbacks,
``link_error`` errbacks, ``self.retry``, ``.delay()`` inside a body, beat occurrences under
``ujobs-bridge scheduler``) would go through the app's own broker to queues no bridge worker
reads, and its results to a backend nobody asks. Split silently, a chain would stop half-way.
So when the bridge binds such an app to its database (``loading.CeleryApp.bind``), ``adopt``
turns it into a ``celery_compat.Celery`` in place: its class gains ``celery_compat.Celery`` in
front (the app object, its tasks, configuration and ``shared_task`` bindings stay the same
objects), and the helpers Celery has already built lazily from the old classes (``amqp``,
``control``, the result backend) are dropped so the next use builds the bridge's. Task names
matching ``ujobs_broker_tasks`` still go to the app's broker, exactly as from a celery_compat
app. ``announce`` logs it once per command, with how to make it explicit.

What it is not: ``celery -A proj worker`` on a plain app (that is Celery's own worker, which
consumes the broker; nothing here touches it), and not a way to run a plain app's senders
(web processes) on the bridge: those change their import (``from celery_compat import Celery``).
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from typing import Any

from celery_compat.app import Celery as BridgeCelery

log = logging.getLogger("celery_compat.adoption")

_classes: dict[type, type] = {}
_lock = threading.Lock()
# Helpers ``celery.Celery`` caches per app (``cached_property``), built from the classes the app
# had before adoption: dropped so the bridge's are built at their next use.
_CACHED = ("amqp", "control", "Worker", "Beat")


def adopted_class(cls: type) -> type:
    """``cls`` with ``celery_compat.Celery`` in front (one class per plain app class)."""
    with _lock:
        found = _classes.get(cls)
        if found is None:
            found = type(
                f"Adopted{cls.__name__}",
                (BridgeCelery, cls),
                {"__module__": __name__, "__doc__": f"{cls.__qualname__}, adopted by the bridge"},
            )
            _classes[cls] = found
        return found


def adopt(app: Any) -> bool:
    """Make the plain Celery ``app`` send to and store results in Postgres, as a
    ``celery_compat.Celery`` does. ``False`` when it already is one (nothing to do)."""
    if isinstance(app, BridgeCelery):
        return False
    cls = adopted_class(type(app))
    app.__class__ = cls
    # ``celery.Celery.__init__`` copies these class attributes onto the instance
    app.amqp_cls = BridgeCelery.amqp_cls
    app.control_cls = BridgeCelery.control_cls
    app.backend_cls = BridgeCelery.backend_cls
    app._ujobs_client = None
    app._ujobs_dsn_cache = None
    for name in _CACHED:
        app.__dict__.pop(name, None)
    app._backend_cache = None  # a thread-safe backend is cached here, any other per thread
    app._local.__dict__.pop("backend", None)
    return True


def announce(app: Any, spec: str) -> None:
    """Say once per command (not again in each pool child) that ``app`` was adopted."""
    if multiprocessing.parent_process() is not None:
        return
    globs = app.conf.get("ujobs_broker_tasks") or ()
    kept = f" except tasks matching ujobs_broker_tasks {list(globs)!r}" if globs else ""
    log.warning(
        "adopted the plain celery.Celery app %r (-A %s): what its tasks send (chain steps, "
        "link/link_error, retries, .delay() inside a body) goes to Postgres%s, and its results "
        "are stored in Postgres; to make this explicit, build it with "
        "`from celery_compat import Celery`",
        app.main,
        spec,
        kept,
    )
