"""The parameters of one bench run, and where the shared services are.

Why it exists: every system module needs the same numbers (N, warm-ups, deadlines) and the same
service addresses, and every name the bench creates in a shared service (Redis keys, broker
queues, Postgres databases) must carry this run's id so that parallel runs and other users of the
same Redis/RabbitMQ/Postgres are never touched.

What it is not: argument parsing (``__main__.py``) or configuration of the systems under test.
Service addresses can be overridden with ``BENCH_PG_ADMIN_DSN``, ``BENCH_REDIS_URL`` and
``BENCH_AMQP_URL``.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

SYSTEMS = ("ujobs", "celery-compat", "celery-redis", "celery-rabbitmq", "raw", "migrate")
TITLES = {
    "ujobs": "ujobs-bridge",
    "celery-compat": "celery_compat (bridge)",
    "celery-redis": "Celery+Redis",
    "celery-rabbitmq": "Celery+RabbitMQ",
    "raw": "raw SKIP LOCKED",
    "migrate": "ujobs-bridge migrate",
}
BASELINE = "celery-redis"

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_DSN = os.environ.get(
    "BENCH_PG_ADMIN_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)
# A dedicated db number: Celery's Redis transport and our counters live there, never FLUSHDB'd.
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")

CORES = os.cpu_count() or 1


@dataclass(frozen=True)
class Settings:
    jobs: int = 20_000
    rounds: int = 3
    only: tuple[str, ...] = SYSTEMS
    latency_samples: int = 500
    latency_warmup: int = 20
    latency_gap_s: float = 0.010
    per_core: int = CORES
    raw_batch_sizes: tuple[int, ...] = (1, 10, 100)
    poll_s: float = 0.020
    rss_sample_s: float = 0.050
    drain_deadline_s: float | None = None
    cells: tuple[str, ...] = ()  # titles from bench.cells.SELECTABLE to run; empty = every cell
    json_out: Path | None = None
    lean_jobs: int = 1_000_000  # the lean-table cell's N (``--lean-jobs``)
    scale_jobs: int = 50_000  # the many-workers cell's N (``--scale-jobs``)
    scale_counts: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # its process counts
    scale_svg: Path | None = None  # where its chart goes (``--scale-svg``; default: the log dir)
    dashboard_rows: int = 1_000_000  # rows in x_jobs of the dashboard cell (``--dashboard-rows``)
    dashboard_requests: int = 20  # timed requests per page
    run_id: str = field(default_factory=lambda: f"{os.getpid()}_{uuid.uuid4().hex[:6]}")

    @property
    def drain_deadline(self) -> float:
        """Seconds one drain may take before it is abandoned (and reported as failed)."""
        if self.drain_deadline_s is not None:
            return self.drain_deadline_s
        return 60.0 + self.jobs / 100.0

    @property
    def lean_deadline(self) -> float:
        """Seconds the lean-table cell may take."""
        return 120.0 + self.lean_jobs / 200.0

    def wants(self, cell: str) -> bool:
        return not self.cells or cell in self.cells

    def key(self, system: str, what: str) -> str:
        """A Redis key / queue name private to this run and system."""
        return f"ujb_bench:{self.run_id}:{system}:{what}"

    def queue_name(self, system: str) -> str:
        return f"ujb_bench_{self.run_id}_{system.replace('-', '_')}"

    def database_name(self, system: str) -> str:
        return f"ujb_bench_{self.run_id}_{system.replace('-', '_')}"
