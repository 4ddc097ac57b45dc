"""What one drain measured: its clock, its first completion, its RSS and the machine's CPU.

Why it exists: every drain cell (the engine's, Celery's, celery_compat's, the step pairs, the
many-workers points) and ``migrate``'s broker drains report the same figures, computed the same
way from one record; ``cells`` measures them, ``runner`` records them.

What it is not: the measuring (``cells.timed_drain``, ``migrate_system``).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import machine_cpu
from .procs import MIB


@dataclass(frozen=True)
class DrainResult:
    jobs: int
    seconds: float  # spawn -> N-th completion
    first_seconds: float  # spawn -> first completion seen
    first_count: int  # completions already counted at that moment
    final_count: int
    rss_start: int
    rss_end: int
    rss_peak: int
    report_rss: bool = True
    machine_cpu_s: float = float("nan")  # every process's busy CPU, spawn -> N-th (machine_cpu)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    @property
    def cpu_per_job_us(self) -> float:
        """The machine's busy CPU per job (µs): the drain's processes, Postgres, the broker."""
        return machine_cpu.per_unit_us(self.machine_cpu_s, self.jobs)

    @property
    def steady_rate(self) -> float:
        """Jobs/s between the first and the N-th completion seen (start-up excluded)."""
        span = self.seconds - self.first_seconds
        return (self.jobs - self.first_count) / span if span > 0 else float("nan")

    def summary(self) -> str:
        return (
            f"{self.rate:,.0f} jobs/s ({self.seconds:.2f}s, first done at "
            f"{self.first_seconds:.2f}s; machine CPU {self.cpu_per_job_us:,.0f} us a job; RSS "
            f"{self.rss_start / MIB:.0f}->{self.rss_end / MIB:.0f} MiB, peak "
            f"{self.rss_peak / MIB:.0f})"
        )


@dataclass(frozen=True)
class MigrateResult(DrainResult):
    """A ``ujobs-bridge migrate`` run: ``seconds`` is spawn -> exit, ``first_seconds`` spawn ->
    first row visible, ``own_seconds`` the drainer's own clock (its ``--json`` ``elapsed_s``)."""

    own_seconds: float = float("nan")
    broker_cpu_s: float = float("nan")  # the broker process's own CPU, spawn -> exit

    @property
    def own_rate(self) -> float:
        return self.jobs / self.own_seconds if self.own_seconds > 0 else float("nan")

    @property
    def broker_cpu_per_message_us(self) -> float:
        return machine_cpu.per_unit_us(self.broker_cpu_s, self.jobs)

    def summary(self) -> str:
        return (
            f"{self.rate:,.0f} msgs/s spawn->exit ({self.seconds:.2f}s, first row at "
            f"{self.first_seconds:.2f}s); {self.own_rate:,.0f} msgs/s on the drainer's clock "
            f"({self.own_seconds:.2f}s); machine CPU {self.cpu_per_job_us:,.0f} us a message "
            f"(the broker's {self.broker_cpu_per_message_us:,.0f}); RSS "
            f"{self.rss_start / MIB:.0f}->{self.rss_end / MIB:.0f} MiB, peak "
            f"{self.rss_peak / MIB:.0f}"
        )
