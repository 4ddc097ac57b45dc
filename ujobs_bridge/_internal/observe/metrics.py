"""The Prometheus series a process counts itself: jobs finished by outcome, attempt duration,
pick-up latency, lease rescues, scheduler fires and catch-ups.

Why it exists: these are events inside one process (a worker settles an attempt, a scheduler
fires an occurrence) that no database read can count after the fact; each process exposes its
own on ``--metrics-port`` (``metrics_http.py``) and Prometheus sums them across the fleet. What
the database knows (queue depth, oldest ready age, outbox lag, live workers) is read at scrape
time instead (``metrics_db.py``), once, by the dashboard.

Every series lives in ``REGISTRY`` (not prometheus_client's global one), so a test or an
embedding application decides what is exposed. Label values are job and queue names the
operator declared, never input data. docs/how-to/metrics.md lists each series with sample queries.

What it is not: an exporter of the job rows, or a tracing system (``tracing.py``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Histogram

from ujobs_bridge.records import ClaimedJob

REGISTRY = CollectorRegistry(auto_describe=True)

# seconds: attempts from a millisecond to an hour; pick-up from a millisecond to ten minutes
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
PICKUP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 600)

JOBS_FINISHED = Counter(
    "ujobs_jobs_finished",
    "Attempts settled by this process, by job name, queue and outcome "
    "(done, retried, dead, cancelled, snoozed, suspended, handed_back, released).",
    ["name", "queue", "outcome"],
    registry=REGISTRY,
)
ATTEMPT_DURATION = Histogram(
    "ujobs_attempt_duration_seconds",
    "Seconds from an attempt's claim to its settlement, by job name and queue.",
    ["name", "queue"],
    buckets=DURATION_BUCKETS,
    registry=REGISTRY,
)
PICKUP_LATENCY = Histogram(
    "ujobs_pickup_latency_seconds",
    "Seconds between a job becoming due (run_at) and a worker claiming it, by queue.",
    ["queue"],
    buckets=PICKUP_BUCKETS,
    registry=REGISTRY,
)
LEASE_RESCUES = Counter(
    "ujobs_lease_rescues",
    "Jobs whose lease ran out (worker killed, paused or cut off) rescued by this worker.",
    registry=REGISTRY,
)
SCHEDULER_FIRES = Counter(
    "ujobs_scheduler_fires",
    "Occurrences of periodic tasks fired by this scheduler, by task.",
    ["task"],
    registry=REGISTRY,
)
SCHEDULER_CATCH_UPS = Counter(
    "ujobs_scheduler_catch_ups",
    "Occurrences fired late, by catch-up after downtime, by task.",
    ["task"],
    registry=REGISTRY,
)


def claimed(job: ClaimedJob, now: datetime | None = None) -> float:
    """Record one claim's pick-up latency; returns the monotonic claim instant."""
    if job.due_at is not None:
        at = now or datetime.now(UTC)
        PICKUP_LATENCY.labels(job.queue).observe(max(0.0, (at - job.due_at).total_seconds()))
    return time.monotonic()


def settled(job: ClaimedJob, outcome: str, claimed_at: float) -> None:
    JOBS_FINISHED.labels(job.name, job.queue, outcome).inc()
    ATTEMPT_DURATION.labels(job.name, job.queue).observe(time.monotonic() - claimed_at)
