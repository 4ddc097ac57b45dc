"""A Celery result backend on Postgres: ``AsyncResult``, groups and chords over the jobs database.

Why it exists: results are the half of Celery that needs a store beside the queue. This is
Celery's own key/value backend logic (meta encoding, group save/restore, chord joins) with the
storage swapped for ``x_celery_results``, so every behaviour Celery's tests pin comes from
Celery itself. Three things are ours:

* ``get()``/``join`` wake on a NOTIFY sent with the write (``result_listener.py``), not on a
  half-second poll;
* the chord counter counts each header part ONCE, by child task id, in one atomic statement, so
  a redelivered part can never fire the body twice or early;
* an id whose stored meta is not final (none, STARTED, RETRY) is answered from its job rows: a
  message dead-lettered by the engine (its workers kept dying) reads FAILURE, a revoked one
  (including a retry sent after its task id was revoked) REVOKED.

What it is not: the sender or the executor. Results are JSON only (``result_serializer='json'``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.exceptions import ImproperlyConfigured, TaskRevokedError, TimeoutError, WorkerLostError

from ujobs_bridge.client import Client

from . import store
from .result_listener import ResultListener

SAFETY_RECHECK_S = 2.0


def bytes_to_str(value: Any) -> str:
    """Celery hands keys and values as bytes or str; the store speaks text."""
    return value.decode("utf-8") if isinstance(value, bytes | bytearray) else str(value)


class PostgresBackend(KeyValueStoreBackend):  # type: ignore[misc]
    """``result_backend`` for celery_compat apps (set for you by ``celery_compat.Celery``)."""

    implements_incr = True
    supports_native_join = True
    supports_autoexpire = True
    thread_safe = True  # one instance (one LISTEN connection) per process, not per thread

    def __init__(self, app: Any = None, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app=app, url=url, **kwargs)
        # Celery's BaseBackend sets this per instance from ``result_backend_thread_safe``
        # (default False), which would make one backend, and one LISTEN connection, per thread.
        self.thread_safe = True
        serializer = self.app.conf.result_serializer
        if serializer not in (None, "json"):
            raise ImproperlyConfigured(
                f"celery_compat stores results as JSON, but result_serializer is {serializer!r}; "
                "set result_serializer='json' (results must be JSON-serialisable)"
            )
        self._local = threading.local()
        self._listener: ResultListener | None = None
        self._listener_lock = threading.Lock()

    # -- storage -------------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        client: Client = self.app.ujobs_client
        return client

    def _ttl(self) -> float | None:
        expires = self.expires
        return float(expires) if expires else None

    def get(self, key: Any) -> str | None:
        with self.client.pool.connection() as conn:
            return store.result_get(conn, bytes_to_str(key))

    def mget(self, keys: Any) -> list[str | None]:
        wanted = [bytes_to_str(k) for k in keys]
        with self.client.pool.connection() as conn:
            found = store.result_mget(conn, wanted)
        return [found.get(k) for k in wanted]

    def set(self, key: Any, value: Any) -> None:
        with self.client.pool.connection() as conn:
            store.result_set(conn, bytes_to_str(key), bytes_to_str(value), self._ttl())

    def delete(self, key: Any) -> None:
        with self.client.pool.connection() as conn:
            store.result_delete(conn, bytes_to_str(key))

    def incr(self, key: Any) -> int:
        part = getattr(self._local, "chord_part", None)
        with self.client.pool.connection() as conn:
            if part is None:
                return store.counter_incr(conn, bytes_to_str(key))
            value = store.chord_part_incr(conn, bytes_to_str(key), part)
        # A part counted before (a redelivered message) must not move the counter: report it as
        # past the chord size, which Celery treats as "nothing to do".
        return sys.maxsize if value is None else value

    def expire(self, key: Any, value: Any) -> None:
        if value:
            with self.client.pool.connection() as conn:
                store.result_expire(conn, bytes_to_str(key), float(value))

    def set_chord_size(self, group_id: Any, chord_size: int) -> None:
        """Keep the header's size as Celery counts it (a chain ending in a group counts that
        group's tasks); the base key/value backend would fall back to the number of header
        entries and join a nested group early (as the Redis backend does, kept by group id)."""
        self.set(self.get_key_for_group(group_id, ".s"), str(int(chord_size)))

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> Any:
        self._local.chord_part = request.id
        try:
            chord = request.chord
            if isinstance(chord, dict) and chord.get("chord_size") is None and request.group:
                size = self.get(self.get_key_for_group(request.group, ".s"))
                if size is not None:
                    request.chord = dict(chord, chord_size=int(size))
            return super().on_chord_part_return(request, state, result, **kwargs)
        finally:
            self._local.chord_part = None

    # -- reading ------------------------------------------------------------------------------

    def _store_result(self, *args: Any, **kwargs: Any) -> Any:
        # Celery re-reads the stored meta here only to never overwrite SUCCESS: skip the job rows.
        self._local.storing = True
        try:
            return super()._store_result(*args, **kwargs)
        finally:
            self._local.storing = False

    def _get_task_meta_for(self, task_id: Any) -> dict[str, Any]:
        meta: dict[str, Any] = super()._get_task_meta_for(task_id)
        if meta.get("status") in states.READY_STATES or getattr(self._local, "storing", False):
            return meta
        # Not finished by the stored meta (PENDING, STARTED, RETRY): the job rows may know that
        # it never will run (revoked before its message ran, dead-lettered).
        return self._meta_from_jobs(bytes_to_str(task_id)) or meta

    def _meta_from_jobs(self, task_id: str) -> dict[str, Any] | None:
        with self.client.pool.connection() as conn:
            rows = store.jobs_of_task(conn, task_id)
        if not rows:
            return None
        _job_id, state, last_error, updated_at = rows[0]
        if state == "dead":
            exc: BaseException = WorkerLostError(last_error or "the job was dead-lettered")
            status = states.FAILURE
        elif state == "cancelled":
            exc = TaskRevokedError(last_error or "revoked")
            status = states.REVOKED
        else:
            return None
        return {
            "status": status,
            "result": self.prepare_exception(exc),
            "traceback": last_error,
            "children": [],
            "date_done": updated_at.isoformat(),
            "task_id": task_id,
        }

    # -- waiting ------------------------------------------------------------------------------

    def listener(self) -> ResultListener:
        with self._listener_lock:
            if self._listener is None:
                self._listener = ResultListener(self.client.dsn)
            return self._listener

    def close(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                self._listener.stop()
                self._listener = None

    def wait_for(
        self,
        task_id: Any,
        timeout: float | None = None,
        interval: float = 0.5,
        no_ack: bool = True,
        on_interval: Any = None,
    ) -> dict[str, Any]:
        """Wait for a task's result: woken by its NOTIFY, re-reading the row after each wake."""
        self._ensure_not_eager()
        key = bytes_to_str(self.get_key_for_task(task_id))
        deadline = None if timeout is None else time.monotonic() + timeout
        listener = self.listener()
        event = listener.watch([key])
        try:
            while True:
                event.clear()
                meta: dict[str, Any] = self.get_task_meta(task_id, cache=False)
                if on_interval:  # before returning, as Celery's async drain loop does: a
                    on_interval()  # failed parent (chord header, chain link) raises first
                if meta["status"] in states.READY_STATES:
                    return meta
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("The operation timed out.")
                event.wait(
                    SAFETY_RECHECK_S if remaining is None else min(remaining, SAFETY_RECHECK_S)
                )
        finally:
            listener.unwatch([key], event)

    def get_many(
        self,
        task_ids: Any,
        timeout: float | None = None,
        interval: float = 0.5,
        no_ack: bool = True,
        on_message: Any = None,
        on_interval: Any = None,
        max_iterations: int | None = None,
        READY_STATES: frozenset[str] = states.READY_STATES,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Yield ``(task_id, meta)`` as results become ready, woken by NOTIFY (used by joins)."""
        pending = {bytes_to_str(t) for t in task_ids}
        for task_id in list(pending):
            cached = self._cache.get(task_id)
            if cached is not None and cached["status"] in READY_STATES:
                pending.discard(task_id)
                yield task_id, cached
        keys = {bytes_to_str(self.get_key_for_task(t)): t for t in pending}
        deadline = None if timeout is None else time.monotonic() + timeout
        event = self.listener().watch(keys)
        iterations = 0
        try:
            while pending:
                event.clear()
                wanted = [k for k, t in keys.items() if t in pending]
                ready = self._mget_to_results(
                    self.mget(wanted), [keys[k] for k in wanted], READY_STATES
                )
                self._cache.update(ready)
                for task_id, meta in ready.items():
                    pending.discard(bytes_to_str(task_id))
                    if on_message is not None:
                        on_message(meta)
                    yield bytes_to_str(task_id), meta
                if not pending:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"Operation timed out ({timeout})")
                if on_interval:
                    on_interval()
                event.wait(
                    SAFETY_RECHECK_S if remaining is None else min(remaining, SAFETY_RECHECK_S)
                )
                iterations += 1
                if max_iterations and iterations >= max_iterations:
                    break
        finally:
            self.listener().unwatch(keys, event)
