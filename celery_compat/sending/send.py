"""Send Celery task messages into ``x_jobs`` instead of a broker.

Why it exists: Celery builds the protocol-v2 message itself (``amqp.create_task_message``:
headers, ``[args, kwargs, embed]`` body, properties), so ids, eta/expires, chains, chords,
callbacks and stamps come out exactly as Celery makes them. This module replaces only the last
step, ``send_task_message``: it resolves the queue the way Celery does, fires
``before_task_publish``/``after_task_publish`` with the same argument shapes (handlers that
unpack ``body`` or read ``headers["id"]`` keep working), and inserts the row: on the caller's
connection inside ``enqueue_in``/Django ``atomic()``, else through the pool in autocommit,
retried as Celery retries a publish (``publish_retry``: ``retry``/``retry_policy``, then kombu's
``OperationalError``) when the database cannot be reached. A send on a transaction of its own
(the pool's, one statement; a group's, one batch) commits with the send commit the app
(``ujobs_send_commit``) or the call (``apply_async(..., ujobs_send_commit=...)``) chose; one
that joins the caller's transaction commits as the caller does, and a per-call choice there is
refused (``ujobs_bridge/_internal/jobs/send_commit.py``).

Tasks whose names match ``ujobs_broker_tasks`` still go to the real broker through Celery's
own sender, so Celery workers keep running them during a cutover.

What it is not: the Celery app (``app.py``) or the executor (``execution.py``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from celery import signals
from celery.app.amqp import AMQP
from celery.utils.collections import DictAttribute
from kombu.entity import Queue
from psycopg_pool import PoolTimeout

from celery_compat.db import message_jobs
from celery_compat.events import task_events
from celery_compat.sending import group_sends, publish_retry, send_keys
from celery_compat.sending.message_row import CeleryMessage, check_limits, check_serializer
from celery_compat.sending.queue_names import bridge_queue
from celery_compat.sending.transaction import Held, batch_hold, current_connection, write_held
from ujobs_bridge.ext.database import DirectStatement, Role, connect
from ujobs_bridge.ext.jobs import send_commit as commits
from ujobs_bridge.ext.observe import redact_repr

# How long a send waits for the pool to hand out a connection before it opens one of its own;
# shorter while the pool is catching up after an outage (``BridgeAMQP._send_connection``).
POOL_WAIT_S = 1.0
POOL_WAIT_LAGGING_S = 0.05
SEND_ROLE = Role("client")
SEND_COMMIT_OPTION = "ujobs_send_commit"  # the app setting, and the per-call option


class _NoBrokerConnection:
    """Stands in for ``producer.connection`` where Celery wraps a publish in it."""

    @contextlib.contextmanager
    def _reraise_as_library_errors(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        yield

    def default_channel(self) -> None:  # pragma: no cover - never used for bridge sends
        raise RuntimeError("the bridge producer has no broker channel")


class BridgeProducer:
    """The 'producer' Celery hands to ``send_task_message`` for messages bound for Postgres."""

    connection = _NoBrokerConnection()
    serializer = "json"

    def __repr__(self) -> str:
        return "<celery_compat bridge producer>"


BRIDGE_PRODUCER = BridgeProducer()


_SCALARS = frozenset({str, int, float, bool, type(None)})


def conf_value(conf: Any, key: str, default: Any = None) -> Any:
    """``conf.get(key, default)`` without its exceptions, read live on every call.

    Celery's ``Settings.get`` tries each of its maps under each spelling of the key (with the
    namespace prefix, the old upper-case name) and raises and catches a ``KeyError`` for every
    miss: a key nobody set (``ujobs_broker_tasks``, ``ujobs_max_deliveries``) costs about ten
    exceptions, and every ``.delay()`` reads two. This looks the same spellings up in the same
    maps, in the same order, by membership tests; the spellings of a key depend only on the
    namespace prefix and are kept per (key, prefix). A configuration not loaded yet (its map is
    Celery's ``PendingConfiguration``, whose membership test ignores the prefix) or not Celery's
    ``Settings`` is read with ``conf.get``."""
    try:
        prefix, maps, key_t = conf.prefix, conf.maps, conf.key_t
        if not all(type(m) in _PLAIN_MAPS for m in maps):
            return conf.get(key, default)
        spellings = _SPELLINGS.get((key, prefix))
        if spellings is None:
            spellings = _SPELLINGS[(key, prefix)] = tuple(conf._to_keys(key))
    except AttributeError:  # not Celery's Settings
        return conf.get(key, default)
    for mapping in maps:
        for k in spellings:
            if key_t is not None:
                k = key_t(k)
            if k in mapping:
                return mapping[k]
    return default


_SPELLINGS: dict[tuple[str, Any], tuple[str, ...]] = {}
# Maps whose ``in`` agrees with their ``[]`` (config_from_object wraps an object in DictAttribute).
_PLAIN_MAPS = frozenset({dict, DictAttribute})


class _SendCursors:
    """One cursor per pooled connection, reused by every one-by-one send on it.

    ``conn.execute`` builds a new cursor (its adapters map and transformer, whose dumper caches
    start cold) for every statement, a cost each ``.delay()`` would pay. A pooled connection serves
    one thread at a time, and so does its cursor. A cursor holds its connection, so the entry of
    a connection the pool closed (a restart, idle or expired) is dropped when the next new
    connection's cursor is made; a replaced connection gets a new cursor (``is`` check)."""

    def __init__(self) -> None:
        self._by_conn: dict[int, psycopg.Cursor[Any]] = {}

    def of(self, conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        cursor = self._by_conn.get(id(conn))
        if cursor is not None and cursor.connection is conn:
            return cursor
        live = {k: c for k, c in self._by_conn.items() if not c.connection.closed}
        live[id(conn)] = cursor = conn.cursor()
        self._by_conn = live
        return cursor


_SEND_CURSORS = _SendCursors()


def _json_properties(properties: dict[str, Any]) -> dict[str, Any]:
    if all(type(v) in _SCALARS for v in properties.values()):
        return dict(properties)  # the usual case (Celery's own properties): nothing to drop
    try:
        json.dumps(properties)
        return dict(properties)
    except (TypeError, ValueError):
        pass
    out: dict[str, Any] = {}
    for key, value in properties.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue  # transport objects (exchanges, callables) do not belong in the row
        out[key] = value
    return out


class BridgeAMQP(AMQP):  # type: ignore[misc]
    """Celery's AMQP helper with a send step that writes the message into ``x_jobs``."""

    # How a publish retry sleeps (``publish_retry``); tests inject their own.
    publish_pause: Callable[[float], None] = staticmethod(time.sleep)
    _pool_lagging = False  # the pool could not hand out a connection in time lately
    _pool_errors_seen = 0  # the pool's failed connection attempts, as last counted

    def _create_task_sender(self) -> Any:
        broker_send = super()._create_task_sender()
        amqp = self
        before_publish = signals.before_task_publish
        send_before_publish = before_publish.send
        send_after_publish = signals.after_task_publish.send

        def send_task_message(
            producer: Any,
            name: str,
            message: Any,
            exchange: Any = None,
            routing_key: str | None = None,
            queue: Any = None,
            event_dispatcher: Any = None,
            retry: Any = None,
            retry_policy: dict[str, Any] | None = None,
            serializer: str | None = None,
            delivery_mode: Any = None,
            compression: str | None = None,
            declare: Any = None,
            headers: dict[str, Any] | None = None,
            exchange_type: str | None = None,
            timeout: Any = None,
            confirm_timeout: Any = None,
            **kwargs: Any,
        ) -> None:
            # The bridge's own option: never a message property, never a broker publish's.
            send_commit = kwargs.pop(SEND_COMMIT_OPTION, None) if kwargs else None
            if not isinstance(producer, BridgeProducer) and amqp.to_broker(name):
                return broker_send(  # type: ignore[no-any-return]
                    producer,
                    name,
                    message,
                    exchange=exchange,
                    routing_key=routing_key,
                    queue=queue,
                    event_dispatcher=event_dispatcher,
                    retry=retry,
                    retry_policy=retry_policy,
                    serializer=serializer,
                    delivery_mode=delivery_mode,
                    compression=compression,
                    declare=declare,
                    headers=headers,
                    exchange_type=exchange_type,
                    timeout=timeout,
                    confirm_timeout=confirm_timeout,
                    **kwargs,
                )
            headers2, properties, body, sent_event = message
            if headers:
                headers2.update(headers)
            if kwargs:
                properties.update(kwargs)
            check_serializer(headers2, serializer or amqp.app.conf.task_serializer)
            qname = bridge_queue(amqp.queue_name(queue, exchange, routing_key), name)
            exchange_name = exchange.name if hasattr(exchange, "name") else (exchange or "")
            routing_key = routing_key or qname
            if declare is None and isinstance(queue, Queue):
                declare = [queue]
            if before_publish.receivers:  # the policy is built for receivers only
                policy = dict(amqp.app.conf.task_publish_retry_policy, **(retry_policy or {}))
                send_before_publish(
                    sender=name,
                    body=body,
                    exchange=exchange_name,
                    routing_key=routing_key,
                    declare=declare,
                    headers=headers2,
                    properties=properties,
                    retry_policy=policy,
                )
            args, kwargs_, embed = body
            row = CeleryMessage(
                headers=dict(headers2),
                args=list(args),
                kwargs=dict(kwargs_),
                embed=dict(embed or {}),
                queue=qname,
                properties=_json_properties(properties),
            )
            amqp.insert(row, retry=retry, retry_policy=retry_policy, send_commit=send_commit)
            send_after_publish(
                sender=name,
                body=body,
                headers=headers2,
                exchange=exchange_name,
                routing_key=routing_key,
            )
            if sent_event and not isinstance(producer, BridgeProducer):
                # Handed a broker producer: its task-sent event goes out on it, under the publish
                # policy, buffered by the dispatcher if that fails, exactly as Celery does; its
                # argument reprs with their secrets hidden, as every event the bridge sends.
                sent_event.update(queue=qname, exchange=exchange_name, routing_key=routing_key)
                for field in ("args", "kwargs"):
                    if isinstance(sent_event.get(field), str):
                        sent_event[field] = redact_repr(sent_event[field])
                (event_dispatcher or amqp._event_dispatcher).publish(
                    "task-sent",
                    sent_event,
                    producer,
                    retry=amqp.publish_retries(retry),
                    retry_policy=dict(
                        amqp.app.conf.task_publish_retry_policy, **(retry_policy or {})
                    ),
                )
            elif sent_event:  # task_send_sent_event: Celery's task-sent, queued (never blocks)
                task_events.sent(
                    amqp.app,
                    sent_event,
                    queue=qname,
                    exchange=exchange_name,
                    routing_key=routing_key,
                )
            return None

        return send_task_message

    def to_broker(self, name: str) -> bool:
        """True when a message handed to a broker producer goes to that broker: the task is kept
        there (``ujobs_broker_tasks``), or the app is not a bridge app. Any other task goes to
        Postgres whatever producer it was handed (a beat scheduler's, kombu code's), since the
        bridge workers that run it read only Postgres."""
        goes_to_broker = getattr(self.app, "goes_to_broker", None)
        return goes_to_broker is None or bool(goes_to_broker(name))

    def queue_name(self, queue: Any, exchange: Any, routing_key: str | None) -> str:
        """The queue a message lands in, resolved like Celery's sender (name, Queue or default)."""
        if isinstance(queue, Queue):
            return str(queue.name)
        if isinstance(queue, str) and queue:
            return queue
        if exchange and routing_key:
            return routing_key  # direct exchange semantics: the routing key names the queue
        return str(self.default_queue.name)

    def insert(
        self,
        row: CeleryMessage,
        *,
        retry: bool | None = None,
        retry_policy: dict[str, Any] | None = None,
        send_commit: Any = None,
    ) -> None:
        """Write ``row`` where it belongs now: the caller's transaction, a batch or group being
        gathered, or the pool under Celery's publish retry policy (``publish_retry``).
        ``send_commit``: the call's ``ujobs_send_commit`` (None: the app's), for a send on a
        transaction of its own; refused on the caller's."""
        check_limits(row.headers, row.properties)  # the limits migrate holds a drained one to
        payload = row.input_json()  # EncodeError before any SQL: the caller's transaction lives on
        commit = self.send_commit(send_commit)
        key, held = send_keys.key_of(row)
        conn = current_connection(self.app.ujobs_dsn_params)
        if conn is not None and send_commit is not None:
            raise commits.refused_in_transaction(SEND_COMMIT_OPTION)
        if conn is None and held:
            assert key is not None
            send_keys.hold(row, key)  # this task's own re-send: sent once its outcome is stored
            return
        max_attempts = self.max_attempts()
        if conn is not None and batch_hold(row, payload, max_attempts, key):
            return  # enqueue_in(batch=True): written in one statement when the block exits
        if conn is None and group_sends.hold(row, payload, max_attempts, key):
            return  # a group's send: written together when its producer block exits
        what = f"task {row.headers.get('task')}[{row.task_id}]"
        if conn is not None:
            try:
                self.insert_now(row, conn, payload=payload, key=key, max_attempts=max_attempts)
            except psycopg.Error as exc:
                if publish_retry.unreachable(exc):
                    raise publish_retry.in_transaction_lost(exc, what) from exc
                raise
            return
        level = commits.level(commit)
        publish_retry.publish(
            lambda: self.insert_now(
                row, payload=payload, key=key, max_attempts=max_attempts, commit_level=level
            ),
            retry=lambda: self.publish_retries(retry),
            policy=lambda: self.retry_policy(retry_policy),
            what=what,
            pause=self.publish_pause,
        )

    def publish_retries(self, given: Any = None) -> bool:
        """The call's ``retry``, else ``task_publish_retry`` (Celery's default: True)."""
        if given is None:
            return bool(conf_value(self.app.conf, "task_publish_retry", True))
        return bool(given)

    def retry_policy(self, given: dict[str, Any] | None = None) -> publish_retry.RetryPolicy:
        """``task_publish_retry_policy`` with the call's ``retry_policy`` over it, as Celery merges."""
        configured = conf_value(self.app.conf, "task_publish_retry_policy")
        return publish_retry.RetryPolicy.of(configured, given)

    def gathered(self) -> contextlib.AbstractContextManager[None]:
        """The sends of this block (a group's) are written together, through the pool."""
        return group_sends.gathered(self._write_gathered)

    def _write_gathered(self, held: list[Held]) -> None:
        """A group's sends, in a transaction of their own committed with the app's send commit
        (a member's per-call choice does not change a commit the whole chunk shares)."""
        level = commits.level(self.send_commit())

        def write() -> None:
            with self._send_connection() as conn, conn.transaction():
                if level is not None:
                    message_jobs.set_send_commit(conn, level)
                write_held(conn, held)

        publish_retry.publish(
            write,
            retry=self.publish_retries,
            policy=self.retry_policy,
            what=f"a group of {len(held)} task(s)",
            pause=self.publish_pause,
        )

    @contextlib.contextmanager
    def _send_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection to send on: the pool's; else, when the pool could not hand one out in
        time because it cannot connect (it failed to, or it is not full), a connection of its
        own, so a send that meets an outage fails fast with the driver's reason and one made as
        the database comes back does not wait for the pool's reconnect backoff. A pool that is
        full and busy (a slow database, many senders) is waited for, as before: no storm of
        extra connections. ``_pool_lagging`` shortens the first wait from an outage on until
        the pool serves again."""
        client = self.app.ujobs_client
        pool = client.pool
        wait = POOL_WAIT_LAGGING_S if self._pool_lagging else POOL_WAIT_S
        try:
            pooled = pool.getconn(timeout=wait)
        except PoolTimeout:
            stats = pool.get_stats()  # read only after a timeout: a send that got one pays nothing
            errors = stats.get("connections_errors", 0)
            failing, self._pool_errors_seen = errors != self._pool_errors_seen, errors
            if failing or stats.get("pool_size", 0) < stats.get("pool_max", 1):
                self._pool_lagging = True
                with connect(client.dsn, SEND_ROLE) as own:
                    yield own
                return
            pooled = pool.getconn()  # full and busy: its own timeout, then PoolTimeout
        self._pool_lagging = False
        try:
            yield pooled
        finally:
            pool.putconn(pooled)

    def max_attempts(self) -> int:
        return int(conf_value(self.app.conf, "ujobs_max_deliveries") or 3)

    def send_commit(self, given: Any = None) -> commits.SendCommit:
        """The call's ``ujobs_send_commit``, else the app's (default ``"on"``), checked."""
        if given is not None:
            return commits.checked(given, what=SEND_COMMIT_OPTION)
        configured = conf_value(self.app.conf, SEND_COMMIT_OPTION)
        if configured is None:
            return commits.DEFAULT
        return commits.checked(configured, what=f"app.conf.{SEND_COMMIT_OPTION}")

    def insert_now(
        self,
        row: CeleryMessage,
        conn: Any = None,
        *,
        payload: str | None = None,
        key: send_keys.SendKey | None = None,
        max_attempts: int | None = None,
        commit_level: str | None = None,
    ) -> None:
        """Insert ``row`` now: on ``conn`` (the caller's transaction: its commit is the
        caller's) or through the pool, one statement committed at ``commit_level`` (the
        ``synchronous_commit`` it sets; None: the server's)."""
        if max_attempts is None:
            max_attempts = self.max_attempts()
        if conn is not None:
            message_jobs.enqueue(conn, row, max_attempts=max_attempts, input_json=payload, key=key)
            return
        # One autocommit statement on a pooled connection, borrowed and given back without
        # ``pool.connection()``: its ``with conn:`` commit (nothing to commit in autocommit), its
        # timing stats and its generator are work a one-by-one ``.delay()`` need not pay.
        # ``putconn`` still rolls back a connection returned in a transaction and replaces a
        # broken one; the checkout still runs the pool's check.
        # A message with no send key goes through libpq directly (``DirectStatement``: no cursor
        # machinery per send); behind PgBouncer, and under a key, the cursor.
        with self._send_connection() as conn:
            if key is None and DirectStatement.usable(conn):
                message_jobs.enqueue_direct(
                    conn,
                    row,
                    max_attempts=max_attempts,
                    input_json=payload,
                    commit_level=commit_level,
                )
            else:
                message_jobs.enqueue(
                    _SEND_CURSORS.of(conn),
                    row,
                    max_attempts=max_attempts,
                    input_json=payload,
                    key=key,
                    commit_level=commit_level,
                )
