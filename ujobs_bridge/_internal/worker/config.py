"""The worker's settings, validated when built: refused, never clamped.

Why it exists: a worker with ``-c 0`` runs nothing, one with a NaN poll interval spins, and one
whose heartbeat is slower than its lease loses every job it holds. Each is refused here with a
message naming the setting and the fix.

What it is not: the CLI (which maps flags onto this) or the worker itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.jobs.payload import DEFAULT_MAX_RESULT_BYTES, MAX_RESULT_BYTES_CEILING
from ujobs_bridge.errors import ConfigError

POOLS = ("threads", "processes")
DEFAULT_CONCURRENCY = 8
DEFAULT_PREFETCH_MULTIPLIER = 16
DEFAULT_LEASE_S = 30.0
DEFAULT_POLL_S = 1.0
DEFAULT_SWEEP_S = 5.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0
DEFAULT_CLAIM_BATCH = 100
DEFAULT_ACK_INTERVAL_S = 0.005
DEFAULT_UNREGISTERED_AFTER_S = 60.0
DEFAULT_UNREGISTERED_LOG_EVERY_S = 300.0
DEFAULT_AUTOSCALE_KEEPALIVE_S = 30.0  # idle this long before an autoscaled pool shrinks
DEFAULT_NODE_PREFIX = "ujobs"  # a node is ``ujobs@<host>`` unless named (or its app says)
MAX_CONCURRENCY = 1024


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    queues: tuple[str, ...] | None = None  # None: every queue a registered job declares
    concurrency: int = DEFAULT_CONCURRENCY
    pool: str = "threads"
    prefetch_multiplier: int = DEFAULT_PREFETCH_MULTIPLIER
    lease_s: float = DEFAULT_LEASE_S
    heartbeat_s: float | None = None  # default: lease / 3
    poll_s: float = DEFAULT_POLL_S
    sweep_s: float = DEFAULT_SWEEP_S
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S
    claim_batch: int = DEFAULT_CLAIM_BATCH
    ack_interval_s: float = DEFAULT_ACK_INTERVAL_S
    # Opt-in: outcomes commit without waiting for the WAL flush. A server crash can then lose the
    # last few hundred ms of outcomes; those jobs run again (at-least-once still holds).
    async_acks: bool = False
    # A due job on a consumed queue whose name this worker does not declare is never claimed (a
    # worker that declares it may come); once due this long it is logged as an error, once per
    # (queue, name) per ``unregistered_log_every_s``.
    unregistered_after_s: float = DEFAULT_UNREGISTERED_AFTER_S
    unregistered_log_every_s: float = DEFAULT_UNREGISTERED_LOG_EVERY_S
    # Opt-in: dead-letter such a job (UJ_TASK_UNREGISTERED) once due this long. None: it waits.
    unregistered_dead_after_s: float | None = None
    # Celery's per-child limits (``--pool processes`` only): a child is replaced after this many
    # bodies, or when its resident memory (KiB) exceeds this after a body; the body finishes first.
    max_tasks_per_child: int | None = None
    max_memory_per_child_kib: int | None = None
    # Celery's --time-limit / --soft-time-limit: defaults for the jobs (tasks) that set none,
    # applied by the -A app in the worker and in every pool child (``LoadedApp.apply_time_limits``).
    time_limit_s: float | None = None
    soft_time_limit_s: float | None = None
    # Celery's --autoscale MAX,MIN: the pool starts at MIN (``concurrency``), grows toward MAX
    # while jobs wait, shrinks back after ``autoscale_keepalive_s`` with fewer jobs than slots.
    autoscale: tuple[int, int] | None = None
    autoscale_keepalive_s: float = DEFAULT_AUTOSCALE_KEEPALIVE_S
    # A job's result (its JSON, in bytes) over this fails the job (UJ_OUTPUT_TOO_LARGE) before
    # any statement is built; a Celery task's result too (its result backend reads it).
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    # Thread bodies hung past their timeout: each one's slot goes to a new thread while fewer
    # than this many abandoned threads still run (None: twice the concurrency); one more and
    # the worker hands back what it holds and exits 70 (a supervisor restarts it).
    max_hung_threads: int | None = None

    def __post_init__(self) -> None:
        if self.queues is not None:
            if not self.queues:
                raise ConfigError(
                    "the worker was given an empty queue list",
                    hint="pass -Q with at least one queue, or omit it",
                )
            for name in self.queues:
                validation.queue_name(name)
        self._check_autoscale()  # first: an autoscaled pool's size is its minimum
        validation.positive_int("concurrency (-c)", self.concurrency, maximum=MAX_CONCURRENCY)
        if self.pool not in POOLS:
            raise ConfigError(
                f"pool {self.pool!r} is not known", hint=f"use --pool {' or --pool '.join(POOLS)}"
            )
        self._check_pool_limits()
        validation.positive_int("prefetch_multiplier", self.prefetch_multiplier, maximum=1000)
        validation.positive_int("claim_batch", self.claim_batch, maximum=10_000)
        lease = validation.seconds("lease", self.lease_s)
        if lease < 2:
            raise ConfigError(
                f"lease is {lease}s, too short to renew reliably",
                hint="set the lease to at least 2 seconds",
            )
        beat = self.heartbeat_interval_s
        if beat >= lease / 2:
            raise ConfigError(
                f"heartbeat every {beat}s cannot keep a {lease}s lease",
                hint="set the heartbeat interval below half the lease (the default is lease / 3)",
            )
        validation.positive_int(
            "--max-result-bytes", self.max_result_bytes, maximum=MAX_RESULT_BYTES_CEILING
        )
        if self.max_hung_threads is not None:
            validation.positive_int(
                "--max-hung-threads", self.max_hung_threads, minimum=0, maximum=MAX_CONCURRENCY
            )
        validation.seconds("poll interval", self.poll_s)
        validation.seconds("sweep interval", self.sweep_s)
        validation.seconds("shutdown timeout", self.shutdown_timeout_s, allow_zero=True)
        validation.seconds("ack interval", self.ack_interval_s)
        validation.seconds("unregistered_after_s", self.unregistered_after_s, allow_zero=True)
        validation.seconds("unregistered_log_every_s", self.unregistered_log_every_s)
        if self.unregistered_dead_after_s is not None:
            validation.seconds(
                "unregistered_dead_after_s", self.unregistered_dead_after_s, allow_zero=True
            )

    def _check_pool_limits(self) -> None:
        for flag, value in (
            ("--max-tasks-per-child", self.max_tasks_per_child),
            ("--max-memory-per-child", self.max_memory_per_child_kib),
        ):
            if value is None:
                continue
            validation.positive_int(flag, value)
            if self.pool != "processes":
                raise ConfigError(
                    f"{flag} needs the process pool: it replaces a pool child process, and "
                    f"the {self.pool} pool runs bodies in the worker's own process",
                    hint="add -P prefork (or -P processes), or drop the flag",
                )
        for flag, limit in (
            ("--time-limit", self.time_limit_s),
            ("--soft-time-limit", self.soft_time_limit_s),
        ):
            if limit is not None:
                validation.seconds(flag, limit)

    def _check_autoscale(self) -> None:
        if self.autoscale is None:
            return
        most, least = self.autoscale
        validation.positive_int("--autoscale MAX", most, maximum=MAX_CONCURRENCY)
        if isinstance(least, bool) or not isinstance(least, int) or least < 1:
            raise ConfigError(
                f"--autoscale {most},{least}: the pool cannot shrink below one body slot "
                "(an empty pool would claim nothing, so it could never see work to grow for)",
                hint=f"give a minimum of at least 1: --autoscale {most},1",
            )
        if least > most:
            raise ConfigError(f"--autoscale {most},{least}: MIN is above MAX", hint="give MAX,MIN")
        validation.seconds("autoscale keepalive", self.autoscale_keepalive_s)

    @property
    def heartbeat_interval_s(self) -> float:
        if self.heartbeat_s is None:
            return self.lease_s / 3
        return validation.seconds("heartbeat interval", self.heartbeat_s)

    @property
    def hung_threads_cap(self) -> int:
        """How many abandoned body threads (hung past their timeout) the worker keeps running."""
        if self.max_hung_threads is None:
            return 2 * self.concurrency
        return self.max_hung_threads

    @property
    def capacity(self) -> int:
        """Jobs held at once: running plus prefetched (leased, waiting for a free slot)."""
        return self.concurrency * self.prefetch_multiplier
