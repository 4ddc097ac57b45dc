"""migrate's Prometheus series: messages drained by outcome (counted by the drain loop, exposed
on ``migrate --follow --metrics-port``) and open quarantine entries by reason (read from the
database at the dashboard's scrape, through the ``ujobs_bridge.metrics`` entry point).

Why it exists: during a cutover the operator watches the drain move messages and the quarantine
fill; the engine's scraper cannot know migrate's table, so migrate contributes the read.

What it is not: the drain's report (``report.py``) or the quarantine commands.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric

from migrate.db import quarantine_entries
from ujobs_bridge.ext.observe import REGISTRY

MESSAGES = Counter(
    "ujobs_migrate_messages",
    "Broker messages drained by this process, by outcome (moved, duplicate, quarantined, "
    "quarantine_seen, expired).",
    ["outcome"],
    registry=REGISTRY,
)


def database_families(conn: psycopg.Connection[Any]) -> Iterator[Metric]:
    """``ujobs_migrate_quarantine_open{reason}``: quarantined messages not yet retried or
    discarded."""
    family = GaugeMetricFamily(
        "ujobs_migrate_quarantine_open",
        "Quarantined broker messages not yet retried or discarded, by reason.",
        labels=["reason"],
    )
    for reason, count in sorted(quarantine_entries.open_counts(conn).items()):
        family.add_metric([reason], count)
    yield family
