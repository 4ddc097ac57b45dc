"""The Prometheus series the database answers at scrape time: queue depth by state, the oldest
ready job's age, outbox lag, live workers, and what plugins add (migrate's open quarantine).

Why it exists: these are facts about the shared jobs database, not about one process, so ONE
scraper (the dashboard's ``/metrics``) reads them, with the same indexed statements as the
dashboard (``db/observe.py``); counting them in every worker would multiply them by the fleet.
A database that cannot be reached is a series too (``ujobs_database_up 0``), never a failed
scrape. Packages above the engine add their own database series through the
``ujobs_bridge.metrics`` entry-point group (``plugins.py``): a callable ``(conn) -> metric
families``.

What it is not: the in-process counters (``metrics.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.config import plugins
from ujobs_bridge._internal.db import connections, nodes, observe

log = logging.getLogger("ujobs.metrics")
METRICS_ROLE = connections.Role("metrics")
SHOWN_STATES = ("ready", "scheduled", "running", "sleeping", "waiting", "dead")


def live_workers(conn: psycopg.Connection[Any]) -> dict[str, int] | None:
    """Live worker processes per queue they consume, from worker presence (``x_worker_nodes``:
    nodes whose heartbeat has not expired); ``health``, the dashboard and the
    ``ujobs_live_workers`` series all ask only this function. ``None`` would mean a database
    without presence (kept in the signature for callers that must say "unknown")."""
    return nodes.nodes_per_queue(conn, None)


def _age_s(oldest: datetime | None, now: datetime) -> float:
    return 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())


class DatabaseCollector(Collector):
    """Collects the database series of the jobs database at ``dsn`` on each scrape."""

    def __init__(self, dsn: str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.dsn = dsn
        self.clock = clock

    def describe(self) -> Iterable[Metric]:
        return []  # collected on demand: the registry must not call collect() to describe it

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("ujobs_database_up", "1 if the jobs database answered the scrape.")
        try:
            with connections.connect(self.dsn, METRICS_ROLE) as conn:
                families = list(self._families(conn))
        except psycopg.Error as exc:
            log.warning("ujobs.metrics.database_unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _families(self, conn: psycopg.Connection[Any]) -> Iterator[Metric]:
        now = self.clock.now()
        depth = observe.observe_depth(conn, self.clock.sql_now())
        jobs = GaugeMetricFamily(
            "ujobs_queue_jobs",
            "Jobs per queue and state (scheduled: ready but not yet due; dead: dead letters; a"
            " word in capitals: a package's own terminal failures, such as Celery's FAILURE).",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "ujobs_queue_oldest_ready_age_seconds",
            "Seconds the oldest due, unclaimed job of each queue has waited (0: none).",
            labels=["queue"],
        )
        seen: dict[str, dict[str, int]] = {}
        ages: dict[str, float] = {}
        for d in depth:
            seen.setdefault(d.queue, {})[d.state] = d.jobs
            if d.oldest_due is not None:
                ages[d.queue] = max(ages.get(d.queue, 0.0), _age_s(d.oldest_due, now))
        kinds = sorted({s for states in seen.values() for s in states} - set(SHOWN_STATES))
        for queue, states in sorted(seen.items()):
            for state in (*SHOWN_STATES, *kinds):  # a state with no jobs is 0, not absent
                jobs.add_metric([queue, state], states.get(state, 0))
            oldest.add_metric([queue], ages.get(queue, 0.0))
        yield jobs
        yield oldest
        pending, lag_s = observe.observe_outbox_lag(conn, self.clock.sql_now())
        outbox = GaugeMetricFamily("ujobs_outbox_pending", "Outbox rows not yet published.")
        outbox.add_metric([], pending)
        yield outbox
        lag = GaugeMetricFamily(
            "ujobs_outbox_lag_seconds", "Age of the oldest outbox row not yet published (0: none)."
        )
        lag.add_metric([], lag_s)
        yield lag
        workers = live_workers(conn)
        if workers is not None:
            live = GaugeMetricFamily(
                "ujobs_live_workers",
                "Workers with a recent heartbeat, per queue.",
                labels=["queue"],
            )
            for queue, count in sorted(workers.items()):
                live.add_metric([queue], count)
            yield live
        for name, contribute in plugins.load_all(plugins.METRICS_GROUP):
            try:
                yield from contribute(conn)
            except psycopg.Error as exc:
                log.warning("ujobs.metrics.plugin_failed: %s: %s", name, exc)
