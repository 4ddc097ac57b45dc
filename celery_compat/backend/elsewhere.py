"""The results of tasks that ran on the old system, read through the app's own ``result_backend``.

Why it exists: during the cutover, tasks named in ``ujobs_broker_tasks`` are still published to
the Celery broker and run by Celery workers, which store their results in the app's configured
``result_backend`` (Redis, say), not in Postgres. Application code calls ``.get()``/``.state``
on the bridge app and must not care where a task ran. So when Postgres knows nothing of a task
id (no stored result and no job row: it never went through Postgres), the Postgres backend asks
the configured backend, built from ``result_backend`` exactly as Celery builds it
(``celery.app.backends.by_url``). A result there is answered as that backend decodes it; the
wait for one polls at ``get(interval=...)`` (no NOTIFY comes from another system); a group's
join reads such members there too.

The configured backend is only read, never written: results of tasks run by the bridge stay in
Postgres. Nothing is asked when ``result_backend`` is unset, disabled, or names the bridge's own
backend. When the configured backend cannot be reached, the task reads as Postgres has it
(PENDING) and the failure is logged once per kind of error, so a backend that is gone after the
cutover never breaks ``.state``.

What it is not: a copy of results between the systems, nor a way to send to the old broker
(``ujobs_broker_tasks`` decides that).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.app import backends

log = logging.getLogger("celery_compat.results")

_UNSET = object()


class ConfiguredBackend:
    """The app's ``result_backend`` (made on first use), or None when there is none to ask."""

    def __init__(self, app: Any, own: type) -> None:
        self.app = app
        self.own = own
        self._backend: Any = _UNSET
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def backend(self) -> Any | None:
        with self._lock:
            if self._backend is _UNSET:
                self._backend = self._make()
            return self._backend

    def _make(self) -> Any | None:
        url = self.app.conf.get("result_backend")
        if not url or not isinstance(url, str):
            return None
        cls, url = backends.by_url(url, self.app.loader)
        if issubclass(cls, self.own) or cls.__name__ == "DisabledBackend":
            return None
        return cls(app=self.app, url=url)

    def meta(self, task_id: str) -> dict[str, Any] | None:
        """The task's meta as the configured backend has it, or None (nothing to ask, nothing
        there, or it could not be reached)."""
        backend = self.backend()
        if backend is None:
            return None
        try:
            meta: dict[str, Any] = backend.get_task_meta(task_id, cache=False)
        except Exception as exc:  # a backend gone after the cutover must not break .state
            kind = type(exc).__name__
            if kind not in self._warned:
                self._warned.add(kind)
                log.warning(
                    "could not read task %s from the configured result_backend (%s): %s; "
                    "a task run by a Celery worker reads PENDING until it can",
                    task_id,
                    kind,
                    exc,
                )
            return None
        return meta if meta.get("status") != "PENDING" else None

    def close(self) -> None:
        with self._lock:
            backend, self._backend = self._backend, _UNSET
        close = getattr(backend, "close", None)  # Celery's backends mostly have none
        if callable(close):
            close()
