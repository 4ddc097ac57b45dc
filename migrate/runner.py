"""The drain loop: take a batch, commit it, let it go on the broker; stop cleanly on a signal.

Why it exists: one loop for every broker. Order per batch: ``take`` (the broker still holds the
messages: a processing list, unacked deliveries) → ``prepare`` (decode) → ``commit_prepared``
(rows and quarantine entries, one transaction, on a helper thread while the next batch is taken
and decoded) → fault point ``migrate.after_commit`` → ``acknowledge`` (Redis: the batch's processing
list deleted; RabbitMQ and kombu: ack). A restart first
``recover``\\ s what an earlier run took (Redis processing lists). The stop event (SIGTERM) is
checked between batches, so every batch taken is committed and acknowledged before the exit.
``--follow`` keeps polling every ``poll_s`` (bounded latency from publish to row); otherwise
the run ends when the selected queues are empty. ``--limit`` caps the messages taken.

``DrainLoop`` is a ``ujobs_bridge._internal.service.Service``: ``run(stats)`` drains on the calling
thread (the CLI); ``start()`` runs the same drain on a thread of its own and ``stop()`` sets the
stop event and waits for the batch in flight; ``tick()`` is one batch, synchronously (tests).

What it is not: the CLI (``migrate/cli/migrate.py``) or a transport.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.types.array import ListBinaryDumper
from psycopg.types.string import StrBinaryDumper

from migrate import metrics
from migrate.amqp_queues import discover_queues
from migrate.appinfo import AppInfo
from migrate.batch import (
    DUPLICATE,
    MOVED,
    QUARANTINE_SEEN,
    QUARANTINED,
    Context,
    Prepared,
    Result,
    Taken,
    classify,
    commit_prepared,
    prepare,
)
from migrate.defaults import DEFAULT_BATCH, DEFAULT_POLL_S
from migrate.outages import RideThrough, outage_of
from migrate.report import Stats
from migrate.source import Source
from ujobs_bridge.ext.database import mask_dsn
from ujobs_bridge.ext.worker import Service, fault

log = logging.getLogger("migrate.drain")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    queues: list[str] | None  # None: the app's queues (or every discovered one with all_queues)
    all_queues: bool = False
    drainer_id: str = "drainer"
    restore_unacked: bool = False
    batch: int = DEFAULT_BATCH
    management_url: str | None = None  # RabbitMQ --all-queues: the management API to ask


GC_YOUNG_THRESHOLD = 50_000
PREFETCH_BATCHES = 4  # RabbitMQ: unacked deliveries allowed, in batches (capped at 65,535)


@contextlib.contextmanager
def sparse_gc() -> Iterator[None]:
    """Collect garbage less often while draining; undone on exit.

    Decoding a message makes a dozen short-lived dicts and lists, and a batch stays alive until
    its commit returns, so with Python's default thresholds (a young collection every 700 new
    objects) the collector runs every few messages, promotes each batch into the older
    generations and keeps re-walking everything the process holds (Celery, kombu and psycopg:
    hundreds of thousands of objects): a large share of the drain's CPU. So the
    objects that exist when the drain starts are frozen (left out of collections) and the young
    generation is collected every ``GC_YOUNG_THRESHOLD`` new objects. Cycles are still
    collected. A process that froze objects itself is left alone."""
    old = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(max(old[0], GC_YOUNG_THRESHOLD), old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if freeze:
            gc.unfreeze()


def broker_kind(url: str) -> str:
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("redis", "rediss"):
        return "redis"
    if scheme in ("amqp", "amqps", "pyamqp"):
        return "amqp"
    return "kombu"


def open_source(url: str, app: AppInfo, options: SourceOptions) -> Source:
    kind = broker_kind(url)
    if kind == "redis":
        # import cost: only the named broker's transport loads (Redis's is a large import)
        from migrate.redis_drain import RedisSource

        queues = None if options.all_queues else (options.queues or list(app.queues))
        return RedisSource(
            url, app, queues, drainer_id=options.drainer_id, restore_unacked=options.restore_unacked
        )
    queues = options.queues if options.queues and not options.all_queues else None
    if kind == "amqp":
        # import cost: only the named broker's transport loads
        from migrate.amqp_drain import AmqpSource

        if options.all_queues:  # AMQP cannot list queues: the management API can
            queues = discover_queues(url, options.management_url)
        # Prefetch four batches: one committing, one being decoded, and the next ones arriving
        # meanwhile (a batch is acked only after its commit, so with fewer the broker would
        # wait for each ack before it sends more).
        url = url.replace("pyamqp://", "amqp://", 1)
        return AmqpSource(url, app, queues, prefetch=PREFETCH_BATCHES * options.batch)
    # import cost: only the named broker's transport loads
    from migrate.kombu_drain import KombuSource

    return KombuSource(url, app, queues)


def masked(url: str) -> str:
    return mask_dsn(url)


@dataclass(eq=False)
class DrainLoop(Service):
    """Drains ``source`` into ``conn``; ``stop_event`` (set by a signal handler, or ``stop()``)
    ends it between batches."""

    source: Source
    conn: psycopg.Connection[Any]
    ctx: Context
    stop_event: threading.Event
    batch: int = DEFAULT_BATCH
    follow: bool = False
    limit: int | None = None
    poll_s: float = DEFAULT_POLL_S
    on_batch: Callable[[Stats], None] | None = None
    stats: Stats = field(default_factory=Stats)
    # --follow: an outage of the database or the broker is waited out (``outages.py``), and
    # ``source`` and ``conn`` are then new ones; None: the first outage ends the drain.
    outages: RideThrough | None = None

    def __post_init__(self) -> None:
        Service.__init__(self, "migrate-drain", interval_s=self.poll_s)
        self._stop = self.stop_event  # one stop event: the caller's signal handler and stop()
        self.error: Exception | None = None
        self._let_go = False  # stopped during an outage: source and connection are closed
        self._use(self.conn)

    def _use(self, conn: psycopg.Connection[Any]) -> None:
        # Lists and strings go to Postgres in binary on this connection: celery_enqueue_many
        # takes the batch as arrays, and psycopg's TEXT array dumper escapes every element with
        # a regex (most of the drain's CPU for JSON inputs full of quotes). Only this connection.
        conn.adapters.register_dumper(str, StrBinaryDumper)
        conn.adapters.register_dumper(list, ListBinaryDumper)
        self.conn = conn

    # ------------------------------------------------------------------ ``Service``

    def tick(self) -> int:
        """One batch, synchronously: what an earlier run took (else new messages) is committed,
        then acknowledged on the broker. Returns how many messages it took (0: nothing waiting)."""
        room = self._room(self.stats)
        items = (self.source.recover(room) or self.source.take(room)) if room else []
        if items:
            self._finish(items, self._commit(prepare(items, self.ctx)), self.stats)
        return len(items)

    def _pass(self) -> float:
        """On the service's thread: the whole drain (``run``), then the loop ends."""
        self.run(self.stats)
        self.request_stop()
        return 0.0

    def _on_error(self, exc: Exception) -> float:
        """A drain that failed does not start over by itself: it ends, keeping the error."""
        self.error = exc
        self.request_stop()
        return super()._on_error(exc)

    def _room(self, stats: Stats, pending: int = 0) -> int:
        if self.limit is None:
            return self.batch
        return max(0, min(self.batch, self.limit - stats.taken - pending))

    def _commit(self, batch: Prepared) -> list[Result]:
        fault("migrate.after_take")
        return commit_prepared(self.conn, batch, self.ctx)

    def _release(self, items: list[Taken]) -> None:
        fault("migrate.after_commit")
        self.source.acknowledge(items)

    def _commit_only(self, items: list[Taken], batch: Prepared) -> list[Result]:
        return self._commit(batch)

    def _commit_release(self, items: list[Taken], batch: Prepared) -> list[Result]:
        results = self._commit(batch)
        self._release(items)
        return results

    def _count(self, results: list[Result], stats: Stats) -> None:
        stats.add(results)
        batch = Counter(r.outcome for r in results)
        for outcome, n in batch.items():
            metrics.MESSAGES.labels(outcome).inc(n)
        if results and log.isEnabledFor(logging.INFO):
            log.info(
                "migrate batch: taken=%d moved=%d duplicate=%d quarantined=%d (total moved=%d quarantined=%d)",
                len(results),
                batch[MOVED],
                batch[DUPLICATE],
                batch[QUARANTINED] + batch[QUARANTINE_SEEN],
                stats.outcomes[MOVED],
                stats.outcomes[QUARANTINED] + stats.outcomes[QUARANTINE_SEEN],
                extra={
                    "taken": len(results),
                    "moved": batch[MOVED],
                    "duplicate": batch[DUPLICATE],
                    "quarantined": batch[QUARANTINED] + batch[QUARANTINE_SEEN],
                },
            )
        if self.on_batch is not None:
            self.on_batch(stats)

    def _finish(self, items: list[Taken], results: list[Result], stats: Stats) -> None:
        self._release(items)
        self._count(results, stats)

    def run(self, stats: Stats) -> Stats:
        """Drain on the calling thread until the queues are empty (or ``limit``, or the stop
        event); every batch taken is committed and acknowledged before it returns."""
        self.stats = stats
        with sparse_gc():
            while True:
                try:
                    self._drain(stats)
                    break
                except Exception as exc:
                    if not self._ride_through(exc):
                        raise
                    if self._let_go:
                        break
        stats.stopped_by_signal = self.stop_event.is_set()
        stats.remaining = self._remaining()
        if self.outages is not None:
            stats.outages = self.outages.outages
        return stats

    def _drain(self, stats: Stats) -> None:
        """What an earlier run (or the batch an outage interrupted) left, then new messages."""
        while not self.stop_event.is_set() and (room := self._room(stats)):
            items = self.source.recover(room)
            if not items:
                break
            self._finish(items, self._commit(prepare(items, self.ctx)), stats)
        self._pipeline(stats)

    def _ride_through(self, exc: Exception) -> bool:
        """After ``exc``: False to raise it (not an outage, or no ``outages`` policy); True once
        the drain may go on: reconnected (a new source and connection), or stopped meanwhile."""
        if self.outages is None or outage_of(exc) is None:
            return False
        restored = self.outages.ride(exc, self.source, self.conn)
        if restored is None:  # stopped during the outage: source and connection are closed
            self._let_go = True
            return True
        self.source, conn = restored
        self._use(conn)
        return True

    def _remaining(self) -> int | None:
        """Messages still waiting, or None when the broker cannot say (stopped in an outage)."""
        if self._let_go:
            return None
        try:
            return self.source.remaining()
        except Exception as exc:
            if outage_of(exc) is None:
                raise
            return None

    def _pipeline(self, stats: Stats) -> None:
        """Take and decode batch N+1 while batch N commits on a helper thread; acknowledge N (DEL /
        ack) only once its commit returned. Broker calls stay on this thread (py-amqp and kombu
        channels are not thread-safe), except for a source whose ``acknowledge_anywhere`` says its
        client is thread-safe (Redis): the helper then acknowledges N right after N's commit, in
        the same order, and this thread never waits on that round trip. The database
        connection is used by the helper alone, whose waits for Postgres (and Redis) release
        the GIL for the decoding here. A stop lets the batch in flight finish and be acknowledged."""
        inflight: tuple[list[Taken], Future[list[Result]]] | None = None
        acknowledge_there = bool(getattr(self.source, "acknowledge_anywhere", False))
        with ThreadPoolExecutor(1, thread_name_prefix="migrate-commit") as pool:
            while True:
                pending = len(inflight[0]) if inflight is not None else 0
                room = 0 if self.stop_event.is_set() else self._room(stats, pending)
                items = self.source.take(room) if room else []
                batch = prepare(items, self.ctx) if items else None
                if inflight is not None:
                    done, future = inflight
                    inflight = None
                    if acknowledge_there:
                        self._count(future.result(), stats)
                    else:
                        self._finish(done, future.result(), stats)
                if batch is not None:
                    work = self._commit_release if acknowledge_there else self._commit_only
                    inflight = (items, pool.submit(work, items, batch))
                    continue
                if self.stop_event.is_set() or not self._room(stats):
                    break
                if not self.follow and not self.source.remaining():
                    break
                self.source.idle(self.poll_s)
                if self.source.kind != "amqp":
                    self.stop_event.wait(self.poll_s)


def dry_run(source: Source, ctx: Context, stats: Stats, limit: int | None = None) -> Stats:
    """Classify every waiting message without writing anything or consuming from the broker;
    on a broker where reading marks a message (RabbitMQ: redelivered), count without reading."""
    if not getattr(source, "dry_run_reads", True):
        stats.counted = dict(source.counts())  # type: ignore[attr-defined]
        stats.remaining = source.remaining()
        return stats
    for count, taken in enumerate(source.peek(), start=1):
        stats.add([classify(taken, ctx)])
        if limit is not None and count >= limit:
            break
    stats.remaining = source.remaining()
    return stats
