"""A Celery result backend on Postgres: ``AsyncResult``, groups and chords over the jobs database.

Why it exists: results are the half of Celery that needs a store beside the queue. This is
Celery's own key/value backend logic (meta encoding, group save/restore, chord joins) with the
storage swapped for ``x_celery_results``, so every behaviour Celery's tests pin comes from
Celery itself. What is ours:

* ``get()``/``join`` wake on a NOTIFY sent with the write (``result_listener.py``), not on a
  half-second poll (behind PgBouncer without a listen DSN: they poll at their ``interval``);
* the chord counter counts each header part ONCE, by child task id, in one atomic statement, so
  a redelivered part can never fire the body twice or early;
* chords behave as on Celery's Redis backend where its key/value path differs: the expected size
  is the header's size (``set_chord_size``) plus the parts ``Task.add_to_chord`` added (appended
  atomically, joined in their adder's place), and a header given as a generator is sent as it
  is consumed (no GroupResult saved up front: its parts are listed as they return);
* an id whose stored meta is not final (none, STARTED, RETRY) is answered from its job rows: a
  message dead-lettered by the engine (its workers kept dying) reads FAILURE, one whose task no
  live worker consuming its queue had registered FAILURE ``NotRegistered`` (as Celery's worker
  records an unknown task), a revoked one (including a retry sent after its task id was
  revoked) REVOKED;
* an id Postgres knows nothing of (no result, no job row) is looked up in the app's configured
  ``result_backend`` (``elsewhere.py``): a task kept on the old broker during the cutover and run
  by a Celery worker reads as that backend has it.

A task's result is held to the worker's ``--max-result-bytes`` (as a job's result is): one over
it is never written, and the task reads FAILURE with ``EncodeError`` naming
``UJ_OUTPUT_TOO_LARGE``.

What it is not: the sender or the executor. Results are JSON only (``result_serializer='json'``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from celery import maybe_signature, states
from celery.backends.base import KeyValueStoreBackend, _create_chord_error_with_cause
from celery.exceptions import (
    ChordError,
    ImproperlyConfigured,
    NotRegistered,
    TaskRevokedError,
    TimeoutError,
    WorkerLostError,
)
from celery.result import GroupResult, allow_join_result
from celery.utils.functional import _regen
from kombu.exceptions import EncodeError

from celery_compat.backend.elsewhere import ConfiguredBackend
from celery_compat.backend.listener import ResultListener
from celery_compat.backend.outage import stored
from celery_compat.db import message_jobs, result_store
from celery_compat.sending import group_sends
from ujobs_bridge.client import Client
from ujobs_bridge.ext.database import listen_dsn
from ujobs_bridge.ext.jobs import (
    DEFAULT_MAX_RESULT_BYTES,
    current_job,
    result_size,
    result_too_large,
)

SAFETY_RECHECK_S = 2.0
# The dead row of a message no live worker consuming its queue had registered (the engine's
# UJ_TASK_UNREGISTERED dead letter): the task name is quoted in it.
UNREGISTERED = re.compile(r"UJ_TASK_UNREGISTERED: .*?declares task '(.*)'")
logger = logging.getLogger(__name__)


def _poll_s(interval: Any) -> float:
    """A waiter's re-read interval without wake-ups: Celery's ``interval`` (0.5 s by default)."""
    return max(0.01, float(interval or 0.5))


def bytes_to_str(value: Any) -> str:
    """Celery hands keys and values as bytes or str; the store speaks text."""
    return value.decode("utf-8") if isinstance(value, bytes | bytearray) else str(value)


def storable_key(key: str) -> bool:
    """Whether a row can hold ``key`` (a task or group id in a result key): no NUL, no lone
    surrogate. A key it cannot hold was never stored: reading it finds nothing."""
    if "\x00" in key:
        return False
    if key.isascii():
        return True
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _result_limit() -> int:
    """The running worker's ``--max-result-bytes`` (from the job the task runs in)."""
    try:
        return current_job().max_result_bytes
    except RuntimeError:  # not in a job body: a result stored by hand
        return DEFAULT_MAX_RESULT_BYTES


def _refuse_oversize(key: Any, value: Any) -> None:
    """A task result over the worker's limit is not written: ``EncodeError`` (Celery's error for
    a result it cannot store), which the tracer records as the task's FAILURE instead, so
    ``.get()`` raises it with the code and the limit. Checked on the encoded meta, before any
    statement is built."""
    limit = _result_limit()
    if isinstance(value, bytes | bytearray):
        size = len(value) if len(value) > limit else None
    else:
        size = result_size(str(value), limit)
    if size is not None:
        task_id = bytes_to_str(key).rpartition("celery-task-meta-")[2]
        error = result_too_large(f"the result of task {task_id}", size, limit)
        raise EncodeError(error.render())


def _culprit(joined: Any) -> Any:
    """The first header part that failed, as Celery's Redis backend names it in the chord's
    error (``Dependency <id> raised ...``): the join's own report (the parts it has cached),
    else the first part, in join order, whose state propagates (this backend caches only
    successes, so a failed part is asked for its state)."""
    for culprit in joined._failed_join_report():
        return culprit
    for part in getattr(joined, "results", None) or []:
        nested = _culprit(part) if hasattr(part, "results") else None
        if nested is not None:
            return nested
        if not hasattr(part, "results") and part.state in states.PROPAGATE_STATES:
            return part
    return None


REVOKE_REASONS = ("terminated", "expired", "revoked")


def revoked_reason(last_error: str | None) -> str:
    """A cancelled row's error as Celery's ``TaskRevokedError`` reason: ``terminated``,
    ``expired`` or ``revoked`` (what Celery's worker passes to ``mark_as_revoked``) when the row
    was cancelled for one of those, else the row's own text."""
    text = (last_error or "").removeprefix("UJ_JOB_CANCELLED: ")
    for reason in REVOKE_REASONS:
        if text.startswith(reason):
            return reason
    return last_error or "revoked"


def meta_from_jobs(backend: Any, task_id: str, rows: Any) -> dict[str, Any] | None:
    """A task's meta as its job rows (``message_jobs.jobs_of_task``, newest first) tell it when
    no final result was stored: FAILURE for a dead-lettered message (``NotRegistered`` when no
    live worker had its task, else ``WorkerLostError``), REVOKED for a cancelled one; None when
    the rows say nothing final. ``backend`` encodes the exception (``prepare_exception``)."""
    _job_id, state, last_error, updated_at = rows[0]
    unknown = UNREGISTERED.match(last_error or "") if state == "dead" else None
    if unknown is not None:  # no live worker consuming its queue has the task: Celery's words
        exc: BaseException = NotRegistered(unknown.group(1))
        status = states.FAILURE
    elif state == "dead":
        exc = WorkerLostError(last_error or "the job was dead-lettered")
        status = states.FAILURE
    elif state == "cancelled":
        exc = TaskRevokedError(revoked_reason(last_error))
        status = states.REVOKED
    else:
        return None
    return {
        "status": status,
        "result": backend.prepare_exception(exc),
        "traceback": last_error,
        "children": [],
        "date_done": updated_at.isoformat(),
        "task_id": task_id,
    }


def _refuse_unstorable_key(key: str) -> None:
    if not storable_key(key):
        raise EncodeError(
            f"the result key {key[:120]!r} holds a NUL or a lone surrogate, which PostgreSQL "
            "cannot store: task and group ids must be plain text"
        )


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
        self._configured = ConfiguredBackend(self.app, PostgresBackend)

    # -- storage -------------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        client: Client = self.app.ujobs_client
        return client

    def _ttl(self) -> float | None:
        expires = self.expires
        return float(expires) if expires else None

    # Each statement runs through ``outage.stored``: retried through a database outage, all but
    # ``incr`` (a counter bumped twice would be wrong; the chord counter counts by task id).

    def get(self, key: Any) -> str | None:
        group_sends.flush()  # a read inside a group's send sees that group's messages
        k = bytes_to_str(key)
        if not storable_key(k):
            return None
        return stored(self.client, lambda conn: result_store.result_get(conn, k))

    def mget(self, keys: Any) -> list[str | None]:
        group_sends.flush()
        asked = [bytes_to_str(k) for k in keys]
        wanted = [k for k in asked if storable_key(k)]
        found = stored(self.client, lambda conn: result_store.result_mget(conn, wanted))
        return [found.get(k) for k in asked]

    def set(self, key: Any, value: Any) -> None:
        k, v, ttl = bytes_to_str(key), bytes_to_str(value), self._ttl()
        _refuse_unstorable_key(k)
        stored(self.client, lambda conn: result_store.result_set(conn, k, v, ttl))

    def _set_with_state(self, key: Any, value: Any, state: Any) -> None:
        if not getattr(self._local, "storing", False):  # a group's result: a plain write
            self.set(key, value)
            return
        if state != states.FAILURE:  # the failure (of an oversize result too) is always stored
            _refuse_oversize(key, value)
        # A task result: the statement itself refuses to replace a stored SUCCESS. Celery's
        # guard in _store_result reads first, so two runs of one task id (a replayed message
        # whose re-send already ran) could otherwise write RETRY over SUCCESS in between.
        k, v, ttl, status = bytes_to_str(key), bytes_to_str(value), self._ttl(), str(state)
        _refuse_unstorable_key(k)
        stored(self.client, lambda conn: result_store.result_set(conn, k, v, ttl, status=status))

    def delete(self, key: Any) -> None:
        k = bytes_to_str(key)
        if not storable_key(k):
            return
        stored(self.client, lambda conn: result_store.result_delete(conn, k))

    def incr(self, key: Any) -> int:
        k = bytes_to_str(key)
        return stored(self.client, lambda conn: result_store.counter_incr(conn, k), again=False)

    def expire(self, key: Any, value: Any) -> None:
        if value:
            k, ttl = bytes_to_str(key), float(value)
            stored(self.client, lambda conn: result_store.result_expire(conn, k, ttl))

    # -- chords -------------------------------------------------------------------------------

    def _apply_chord_incr(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        """Save the header's GroupResult for the last part to join, as Celery's key/value path
        does; but not for a header given as a generator: saving it would consume the generator
        before its first task is sent (celery #3021). As on Celery's Redis backend, such a
        chord lists its parts as they return (``.j``, created here, before any is sent)."""
        if not isinstance(header_result_args[1], _regen):
            super()._apply_chord_incr(header_result_args, body, **kwargs)
            return
        self.ensure_chords_allowed()
        listed = self.get_key_for_group(header_result_args[0], ".j")
        self.set(listed, "[]")
        self.expire(listed, self._chord_result_expires)

    def set_chord_size(self, group_id: Any, chord_size: int) -> None:
        """Keep the header's size as Celery counts it (a chain ending in a group counts that
        group's tasks); the base key/value backend would fall back to the number of header
        entries and join a nested group early (as the Redis backend does, kept by group id).
        Celery calls this just before it sends the header's last task."""
        self.set(self.get_key_for_group(group_id, ".s"), str(int(chord_size)))

    def add_to_chord(self, group_id: Any, result: Any) -> None:
        """``Task.add_to_chord``: one more part for the running chord ``group_id``, appended to
        the chord's added list (``.t``) in one statement before Celery sends it, so the body
        waits for it. It joins in its adder's place (as on Redis: group index, then task id)."""
        request = getattr(self.app.current_task, "request", None)
        index = request.group_index if request is not None and request.group == group_id else None
        ttl = float(self.chord_expires) if self.chord_expires else None
        key = bytes_to_str(self.get_key_for_group(group_id, ".t"))
        tid = str(result.id)
        stored(self.client, lambda conn: result_store.chord_add(conn, key, tid, index, ttl))

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> Any:
        """Count this part once (by task id, atomically: a redelivered part counts nothing), then
        send the body when the count reaches the header's size plus the parts added. Size and
        added list are read after the count, so an add committed before another part's count is
        always seen. Before ``set_chord_size`` (a generator header still being sent) the size
        is unknown, and no part can be the last."""
        gid = request.group
        if not gid or not request.id:
            return None
        key = self.get_key_for_chord(gid)
        keys = [self.get_key_for_group(gid, suffix) for suffix in (".s", ".t", ".j")]
        counted, listed = bytes_to_str(key), bytes_to_str(keys[2])
        val = stored(
            self.client,
            lambda conn: result_store.chord_part_incr(
                conn, counted, request.id, listed, request.group_index
            ),
        )
        if val is None:
            return None
        size_raw, added_raw = self.mget(keys[:2])
        chord = request.chord if isinstance(request.chord, dict) else {}
        size = chord.get("chord_size")
        if size is None and size_raw is not None:
            size = int(size_raw)
        added: list[list[Any]] = json.loads(added_raw) if added_raw else []
        deps = None
        if size is None or val >= int(size) + len(added):
            try:
                deps = GroupResult.restore(gid, backend=self)
            except Exception as exc:
                return self._chord_failed(request, ChordError(f"Cannot restore group: {exc!r}"))
            if size is None:
                if deps is None:  # a generator header: its size is set before its last task
                    return None
                size = len(deps)  # a chord sent before sizes were kept (migrated)
        total = int(size) + len(added)
        if val < total:
            for part_key in (key, keys[2], *(keys[1:2] if added else ())):
                self.expire(part_key, self.chord_expires)
            # The last part joins every header result, so keep this one too.
            self.expire(self.get_key_for_group(gid), self._chord_result_expires)
            self.expire(self.get_key_for_task(request.id), self._chord_result_expires)
            return None
        if val > total:
            logger.warning("Chord counter incremented too many times for %r", gid)
            return None
        joined = self._chord_parts(gid, deps, added, keys[2])
        if joined is None:
            return self._chord_failed(request, ChordError(f"GroupResult {gid} no longer exists"))
        try:
            return self._chord_join(request, gid, joined)
        finally:
            if deps is not None:
                deps.delete()
            for part_key in (key, *keys[1:]):
                self.delete(part_key)
            # The chord is done: give the header results back their normal lifetime.
            for dep in joined.results:
                self.expire(self.get_key_for_task(dep.id), self.expires)

    def _chord_parts(self, gid: str, deps: Any, added: list[list[Any]], listed_key: Any) -> Any:
        """The results the body gets, ordered as Celery's Redis backend orders them: by group
        index (a part added by ``add_to_chord`` takes its adder's), then task id. A saved header
        GroupResult keeps its structure (nested groups) with the added parts put in place."""
        app = self.app
        if deps is None:
            raw = self.get(listed_key)
            if raw is None:
                return None
            listed = [(index, tid, app.AsyncResult(tid)) for index, tid in json.loads(raw)]
        elif not added:
            return deps
        else:
            listed = [(i, dep.id, dep) for i, dep in enumerate(deps.results)]
            listed += [(index, tid, app.AsyncResult(tid)) for index, tid in added]
        inf = float("inf")
        listed.sort(key=lambda part: (inf if part[0] is None else part[0], part[1]))
        return app.GroupResult(gid, [part[2] for part in listed])

    def _chord_failed(self, request: Any, error: ChordError) -> Any:
        logger.error("Chord %r raised: %r", request.group, error)
        return self.chord_error_from_stack(maybe_signature(request.chord, app=self.app), error)

    def _chord_join(self, request: Any, gid: str, joined: Any) -> None:
        """Join the header's results and send the body, as Celery's key/value path does."""
        app = self.app
        callback = maybe_signature(request.chord, app=app)
        join = joined.join_native if joined.supports_native_join else joined.join
        try:
            with allow_join_result():
                ret = join(timeout=app.conf.result_chord_join_timeout, propagate=True)
        except Exception as exc:
            culprit = _culprit(joined)
            reason = repr(exc) if culprit is None else f"Dependency {culprit.id} raised {exc!r}"
            logger.exception("Chord %r raised: %r", gid, reason)
            self.chord_error_from_stack(callback, _create_chord_error_with_cause(reason, exc))
            return
        try:
            app.amqp._retry_publish(callback.delay, ret)
        except Exception as exc:
            logger.exception("Chord %r raised: %r", gid, exc)
            error = _create_chord_error_with_cause(f"Callback error: {exc!r}", exc)
            self.chord_error_from_stack(callback, error)

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
        self._local.elsewhere = False
        if meta.get("status") in states.READY_STATES or getattr(self._local, "storing", False):
            return meta
        # Not finished by the stored meta (PENDING, STARTED, RETRY): the job rows may know that
        # it never will run (revoked before its message ran, dead-lettered).
        tid = bytes_to_str(task_id)
        rows = stored(self.client, lambda conn: message_jobs.jobs_of_task(conn, tid))
        if rows:
            return self._meta_from_jobs(tid, rows) or meta
        if meta.get("status") != states.PENDING or not self._elsewhere([tid]):
            return meta
        # Never went through Postgres: a task kept on the old broker (``ujobs_broker_tasks``),
        # run by a Celery worker, has its result in the app's configured result_backend.
        self._local.elsewhere = True
        return self._configured.meta(tid) or meta

    def _elsewhere(self, task_ids: list[str]) -> frozenset[str]:
        """Those of ``task_ids`` that never went through Postgres (no job row in any state), when
        the app configures a result_backend to find them in; else none (and no query)."""
        if not task_ids or self._configured.backend() is None:
            return frozenset()
        here = stored(self.client, lambda conn: message_jobs.task_ids_sent_here(conn, task_ids))
        return frozenset(task_ids) - here

    def _meta_from_jobs(self, task_id: str, rows: Any) -> dict[str, Any] | None:
        return meta_from_jobs(self, task_id, rows)

    # -- waiting ------------------------------------------------------------------------------

    def listener(self) -> ResultListener:
        with self._listener_lock:
            if self._listener is None:
                explicit = self.app.conf.get("ujobs_listen_url") or None
                self._listener = ResultListener(listen_dsn(self.client.dsn, explicit))
            return self._listener

    def close(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                self._listener.stop()
                self._listener = None
        self._configured.close()

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
                # No NOTIFY comes for a result stored by the other system: poll it.
                elsewhere = getattr(self._local, "elsewhere", False)
                recheck = _poll_s(interval) if listener.polling or elsewhere else SAFETY_RECHECK_S
                event.wait(recheck if remaining is None else min(remaining, recheck))
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
        # Members kept on the old broker (no job row) are read from the configured backend,
        # polled: no NOTIFY comes for them.
        elsewhere = self._elsewhere(sorted(pending))
        polled = self.listener().polling or bool(elsewhere)
        recheck = _poll_s(interval) if polled else SAFETY_RECHECK_S
        iterations = 0
        try:
            while pending:
                event.clear()
                wanted = [k for k, t in keys.items() if t in pending]
                ready = self._mget_to_results(
                    self.mget(wanted), [keys[k] for k in wanted], READY_STATES
                )
                for task_id in sorted(elsewhere & pending):
                    found = self._configured.meta(task_id)
                    if found is not None and found.get("status") in READY_STATES:
                        ready[task_id] = found
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
                event.wait(recheck if remaining is None else min(remaining, recheck))
                iterations += 1
                if max_iterations and iterations >= max_iterations:
                    break
        finally:
            self.listener().unwatch(keys, event)
