"""One bench run: set the systems up, run every cell for R interleaved rounds, always clean up.

Why it exists: the order and the clean-up are where benchmarks quietly go wrong. Rounds are
interleaved (round 1 of every system, then round 2 ...) and the system order rotates each round,
so slow drift of the machine (thermal, page cache, a neighbour's load) lands on every system
rather than on one. A cell that fails or runs past its deadline is recorded as an error and the
run goes on; SIGINT/SIGTERM end the run; either way every worker process group is killed and
every bench database, Redis key and broker queue created by the run is removed.

What it is not: measurement (``cells`` and the system modules) or output (``report``).
"""

from __future__ import annotations

import atexit
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape

from . import cells, machine_facts, procs, scale_chart
from .cells import System
from .dashboard_bench import DashboardResult, summary
from .fleet_latency import FleetPoint
from .lean_table import LeanResult
from .many_workers import ScalePoint
from .results import Results
from .settings import AMQP_URL, CORES, REDIS_URL, TITLES, Settings


def build(name: str, settings: Settings, log_dir: Path) -> System:
    if name == "celery-redis":
        from .celery_system import CelerySystem

        return CelerySystem(name, REDIS_URL, settings, log_dir)
    if name == "celery-rabbitmq":
        from .celery_system import CelerySystem

        return CelerySystem(name, AMQP_URL, settings, log_dir)
    if name == "raw":
        from .raw_system import RawSystem

        return RawSystem(settings, log_dir)
    if name == "ujobs":
        from .ujobs_system import UjobsSystem

        return UjobsSystem(settings, log_dir)
    if name == "celery-compat":
        from .compat_system import CompatSystem

        return CompatSystem(settings, log_dir)
    if name == "migrate":
        from .migrate_system import MigrateSystem

        return MigrateSystem(settings, log_dir)
    raise ValueError(f"unknown system {name!r}")


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class Runner:
    def __init__(self, settings: Settings, console: Console) -> None:
        self.settings = settings
        self.console = console
        self.results = Results(settings=_settings_doc(settings))
        self.log_dir = Path(tempfile.mkdtemp(prefix=f"ujb_bench_{settings.run_id}_"))

    def say(self, rnd: int | None, system: str, text: str) -> None:
        where = f"r{rnd + 1}/{self.settings.rounds} " if rnd is not None else ""
        self.console.print(
            f"[dim]{time.strftime('%H:%M:%S')}[/dim] {where}[bold]{system}[/bold] {text}"
        )

    def attempt(self, rnd: int | None, system: str, cell: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        except Exception as exc:
            self.results.error(system, cell, rnd, exc)
            self.say(
                rnd,
                system,
                f"[red]{cell} FAILED[/red] after {time.perf_counter() - t0:.1f}s: {escape(str(exc))}",
            )
            self.results.detail.append(
                {"system": system, "cell": cell, "round": rnd, "traceback": traceback.format_exc()}
            )
            procs.stop_all()
            return None

    def run(self) -> Results:
        signal.signal(signal.SIGTERM, _on_signal)
        atexit.register(procs.stop_all)
        self.results.machine = machine_facts.facts_at_start()
        systems: dict[str, System] = {}
        try:
            for name in self.settings.only:
                system = self.attempt(None, name, "setup", partial(self._setup, name))
                if system is not None:
                    systems[name] = system
            names = list(systems)
            for rnd in range(self.settings.rounds):
                shift = rnd % len(names) if names else 0
                for name in names[shift:] + names[:shift]:
                    self.round(rnd, name, systems[name])
        finally:
            procs.stop_all()
            for name, system in systems.items():
                self.attempt(None, name, "teardown", system.teardown)
            self.results.finished_at = time.time()
            self.results.machine["load_average_1m_end"] = machine_facts.load_average()
            if not self.results.errors:
                shutil.rmtree(self.log_dir, ignore_errors=True)
        return self.results

    def _setup(self, name: str) -> System:
        system = build(name, self.settings, self.log_dir)
        try:
            system.setup()
        except BaseException:
            try:
                system.teardown()
            except Exception as exc:
                self.say(None, name, f"[yellow]teardown after failed setup: {exc}[/yellow]")
            raise
        self.results.systems[name] = {"title": TITLES[name], **system.describe()}
        self.say(None, name, f"ready: {escape(str(self.results.systems[name]))}")
        return system

    def rates(self, rnd: int, name: str, cell: str, fn: Callable[[int], dict[str, float]]) -> None:
        """Run one rate cell (if asked for) and record each of its figures."""
        if not self.settings.wants(cell):
            return
        t0 = time.perf_counter()
        got = self.attempt(rnd, name, cell, lambda: fn(self.settings.jobs))
        if got is None:
            return
        for label, value in got.items():
            self.results.add(name, cell, label, "rate", rnd, value)
        shown = escape(", ".join(f"{k}: {v:,.0f} jobs/s" for k, v in got.items()))
        self.say(rnd, name, f"{cell}: {shown} [dim]({time.perf_counter() - t0:.1f}s)[/dim]")

    def round(self, rnd: int, name: str, system: System) -> None:
        core_drains: dict[str, cells.DrainResult] | None = None
        if isinstance(system, cells.GenericCells):
            core_drains = self.generic(rnd, name, system)
        if isinstance(system, cells.CeleryShaped):
            self.celery_shaped(rnd, name, system, core_drains)
        if isinstance(system, cells.DelayCeiling):
            self.rates(rnd, name, cells.DELAY_ONE, system.delay_ceiling)
        if isinstance(system, cells.StepCeiling):
            self.rates(rnd, name, cells.STEPS, system.step_ceiling)
        if isinstance(system, cells.LeanCells) and self.settings.wants(cells.LEAN) and rnd == 0:
            lean = self.attempt(
                rnd, name, cells.LEAN, partial(system.lean_table, self.settings.lean_jobs)
            )
            self.lean(rnd, name, lean)
        if (
            isinstance(system, cells.FleetLatencyCells)
            and self.settings.wants(cells.FLEET_LATENCY)
            and rnd == 0
        ):
            fleet = self.attempt(rnd, name, cells.FLEET_LATENCY, system.fleet_latency)
            self.fleet_latency(rnd, name, fleet)
        if isinstance(system, cells.ScaleCells) and self.settings.wants(cells.SCALE) and rnd == 0:
            points = self.attempt(
                rnd,
                name,
                cells.SCALE,
                partial(system.many_workers, self.settings.scale_jobs, self.settings.scale_counts),
            )
            self.scale(rnd, name, points)
        if (
            isinstance(system, cells.DashboardCells)
            and self.settings.wants(cells.DASHBOARD)
            and rnd == 0
        ):
            pages = self.attempt(
                rnd,
                name,
                cells.DASHBOARD,
                partial(system.dashboard_pages, self.settings.dashboard_rows),
            )
            self.dashboard(rnd, name, pages)
        if isinstance(system, cells.BrokerDrain) and self.settings.wants(cells.MIGRATE):
            got = self.attempt(
                rnd, name, cells.MIGRATE, partial(system.drain_broker, self.settings.jobs)
            )
            self.broker_drains(rnd, name, got)

    def lean(self, rnd: int, name: str, got: LeanResult | None) -> None:
        """Record the lean-table cell: rate per tenth, HOT ratio, dead tuples, sizes."""
        if got is None:
            return
        add, cell, mib = self.results.add, cells.LEAN, procs.MIB
        for i, rate in enumerate(got.segment_rates):
            add(name, cell, f"tenth {i + 1} of {got.jobs:,}", "rate", rnd, rate)
        add(name, cell, "last tenth ÷ first tenth", "ratio", rnd, got.last_vs_first)
        add(name, cell, "HOT share of updates on x_jobs", "pct", rnd, 100.0 * got.hot_ratio)
        for key in ("n_tup_upd", "n_tup_hot_upd", "n_dead_tup", "autovacuum_count"):
            add(name, cell, f"{key} at the end", "rows", rnd, got.table.get(key, 0))
        add(name, cell, "max n_dead_tup at a tenth", "rows", rnd, max(got.segment_dead, default=0))
        for rel, size in got.sizes.items():
            add(name, cell, f"{rel} at the end", "mib", rnd, size / mib)
            after = got.sizes_vacuumed.get(rel, 0)
            add(name, cell, f"{rel} after VACUUM", "mib", rnd, after / mib)
        self.results.detail.append(
            {"system": name, "cell": cell, "round": rnd, "lean": got.__dict__}
        )
        self.say(rnd, name, f"{cell}: {escape(got.summary())}")

    def fleet_latency(self, rnd: int, name: str, points: list[FleetPoint] | None) -> None:
        """Record the idle-fleet cell: p50, p99 and claims per job for each fleet size."""
        add, cell = self.results.add, cells.FLEET_LATENCY
        for p in points or []:
            label = f"{p.workers} idle worker{'s' if p.workers > 1 else ''}"
            label += " · PgBouncer" if p.bouncer else ""
            add(name, cell, label + " · p50", "p50", rnd, p.p50)
            add(name, cell, label + " · p99", "p99", rnd, p.p99)
            add(name, cell, label + " · claims a job", "ratio", rnd, p.claims_per_job)
            add(name, cell, label + " · empty claims a job", "ratio", rnd, p.empty_per_job)
            add(name, cell, label + " · hand-offs a job", "ratio", rnd, p.hand_offs_per_job)
            self.results.detail.append(
                {"system": name, "cell": cell, "round": rnd, "workers": p.workers,
                 "samples_ms": p.samples_ms, "claims": p.claims, "empty_claims": p.empty_claims,
                 "hand_offs": p.hand_offs,
                 "jobs": p.jobs}
            )  # fmt: skip
            self.say(rnd, name, f"{cell}: {escape(p.summary())}")

    def scale(self, rnd: int, name: str, points: list[ScalePoint] | None) -> None:
        """Record the many-workers cell (one row per layout and count) and draw its chart."""
        if not points:
            return
        add, cell = self.results.add, cells.SCALE
        for p in points:
            label = f"{p.layout} · {p.processes} proc{' · PgBouncer' if p.bouncer else ''}"
            add(name, cell, label, "rate", rnd, p.drain.rate)
            add(name, cell, label + cells.STEADY, "rate_steady", rnd, p.drain.steady_rate)
            add(name, cell, label + " · pick-up p50", "p50", rnd, p.pickup_p50_ms)
            add(name, cell, label + " · pick-up p99", "p99", rnd, p.pickup_p99_ms)
            add(name, cell, label + " · server connections", "rows", rnd, p.server_connections)
            add(name, cell, label + " · lost/dead/redelivered", "rows", rnd,
                p.drain.jobs - p.done + p.dead + p.redelivered)  # fmt: skip
            self.results.detail.append(
                {"system": name, "cell": cell, "round": rnd, "scale": {
                    **{k: v for k, v in p.__dict__.items() if k != "drain"},
                    "drain": p.drain.__dict__}}
            )  # fmt: skip
            self.say(rnd, name, f"{cell} [{escape(p.layout)}]: {escape(p.summary())}")
        path = self.settings.scale_svg or self.log_dir / "many-workers.svg"
        caption = (
            f"N={self.settings.scale_jobs:,} no-op jobs, {CORES} cores, run {self.settings.run_id}"
        )
        scale_chart.write(points, caption, path)
        self.say(rnd, name, f"{cell}: chart written to {path}")

    def dashboard(self, rnd: int, name: str, got: DashboardResult | None) -> None:
        """Record the dashboard cell: each page's median and p95 (ms)."""
        if got is None:
            return
        for label in got.pages:
            self.results.add(
                name, cells.DASHBOARD, f"{label} · median", "ms", rnd, got.median(label)
            )
            self.results.add(name, cells.DASHBOARD, f"{label} · p95", "ms", rnd, got.p95(label))
        self.results.detail.append(
            {"system": name, "cell": cells.DASHBOARD, "round": rnd,
             "dashboard": {"rows": got.rows, "pages": got.pages, "plans": got.plans}}
        )  # fmt: skip
        self.say(rnd, name, f"{cells.DASHBOARD} ({got.rows:,} rows):\n{escape(summary(got))}")

    def broker_drains(
        self, rnd: int, name: str, got: dict[str, cells.MigrateResult] | None
    ) -> None:
        """Record each broker's drain: spawn -> exit, the drainer's clock, and its RSS."""
        add, mib = self.results.add, procs.MIB
        for label, d in (got or {}).items():
            add(name, cells.MIGRATE, f"{label} · spawn→exit", "rate", rnd, d.rate)
            add(name, cells.MIGRATE, f"{label} · drainer's clock", "rate_steady", rnd, d.own_rate)
            add(name, cells.MIGRATE, f"{label} · {cells.CPU_LABEL} a message", "cpu_us", rnd,
                d.cpu_per_job_us)  # fmt: skip
            add(name, cells.MIGRATE, f"{label} · the broker's CPU a message", "cpu_us", rnd,
                d.broker_cpu_per_message_us)  # fmt: skip
            add(
                name,
                cells.RSS_MIGRATE,
                f"{label} · at 1st row",
                "rss_start",
                rnd,
                d.rss_start / mib,
            )
            add(name, cells.RSS_MIGRATE, f"{label} · peak", "rss_peak", rnd, d.rss_peak / mib)
            add(name, cells.RSS_MIGRATE, f"{label} · before exit", "rss_end", rnd, d.rss_end / mib)
            self.results.detail.append(
                {"system": name, "cell": cells.MIGRATE, "round": rnd, "label": label,
                 "drain": d.__dict__}
            )  # fmt: skip
            self.say(rnd, name, f"{cells.MIGRATE} {escape(f'[{label}]')}: {d.summary()}")

    def celery_shaped(
        self,
        rnd: int,
        name: str,
        system: cells.CeleryShaped,
        core_drains: dict[str, cells.DrainResult] | None,
    ) -> None:
        """The Celery-shaped cells. A Celery system's ``prefork -c 2`` drain is the per-core drain
        of this same round when that one ran with 2 processes (one drain, not two)."""
        self.rates(rnd, name, cells.DELAY_ONE, system.delay_one)
        self.rates(rnd, name, cells.DELAY_MANY, system.delay_concurrent)
        self.rates(rnd, name, cells.DELAY_TX, system.delay_tx)
        if not self.settings.wants(cells.DRAIN_SHARED):
            return
        if core_drains and self.settings.per_core == cells.CELERY_PREFORK:
            reused = {f"{k} (this round's per-core drain)": d for k, d in core_drains.items()}
            self.drains(rnd, name, cells.DRAIN_SHARED, None, reused)
            return
        drains = self.attempt(
            rnd, name, cells.DRAIN_SHARED, partial(system.drain_shared, self.settings.jobs)
        )
        self.drains(rnd, name, cells.DRAIN_SHARED, None, drains)

    def generic(
        self, rnd: int, name: str, system: cells.GenericCells
    ) -> dict[str, cells.DrainResult] | None:
        """The engine cells; returns the per-core drain (the Celery-shaped cell may reuse it)."""
        n = self.settings.jobs
        add = self.results.add
        wants = self.settings.wants
        self.rates(rnd, name, cells.ENQ_ONE, system.enqueue_one_by_one)
        self.rates(rnd, name, cells.ENQ_BATCH, system.enqueue_batched)
        if isinstance(system, cells.ProducerCells):
            self.rates(rnd, name, cells.ENQ_PRODUCERS, system.enqueue_producers)
        core_drains: dict[str, cells.DrainResult] | None = None
        for cell, rss_cell, processes in (
            (cells.DRAIN_1, cells.RSS_1, 1),
            (cells.DRAIN_CORE, cells.RSS_CORE, self.settings.per_core),
        ):
            if wants(cell):
                drains = self.attempt(rnd, name, cell, partial(system.drain, n, processes))
                self.drains(rnd, name, cell, rss_cell, drains)
                if cell == cells.DRAIN_CORE:
                    core_drains = drains
        if wants(cells.STEPS) and isinstance(system, cells.StepCells):
            drains = self.attempt(rnd, name, cells.STEPS, partial(system.step_overhead, n, rnd))
            self.drains(rnd, name, cells.STEPS, None, drains)
            if drains:
                plain, stepped = drains[cells.PLAIN_LABEL].rate, drains[cells.STEPS_LABEL].rate
                self.say(rnd, name, f"{cells.STEPS}: x{stepped / plain:.2f} of the plain rate")
        if not wants(cells.LATENCY):
            return core_drains
        got = self.attempt(rnd, name, cells.LATENCY, system.idle_latency)
        if got:
            p50, p99 = cells.percentile(got, 50), cells.percentile(got, 99)
            add(name, cells.LATENCY, "p50", "p50", rnd, p50)
            add(name, cells.LATENCY, "p99", "p99", rnd, p99)
            self.results.detail.append(
                {"system": name, "cell": cells.LATENCY, "round": rnd, "samples_ms": got}
            )
            self.say(
                rnd, name, f"{cells.LATENCY}: p50 {p50:.2f} ms, p99 {p99:.2f} ms (n={len(got)})"
            )
        return core_drains

    def drains(
        self,
        rnd: int,
        name: str,
        cell: str,
        rss_cell: str | None,
        got: dict[str, cells.DrainResult] | None,
    ) -> None:
        """Record each drain's rate, steady rate and (when asked) RSS; say its summary."""
        add = self.results.add
        for label, d in (got or {}).items():
            add(name, cell, label, "rate", rnd, d.rate)
            add(name, cell, label + cells.STEADY, "rate_steady", rnd, d.steady_rate)
            add(name, cell, f"{label} · {cells.CPU_LABEL} a job", "cpu_us", rnd, d.cpu_per_job_us)
            if rss_cell is not None and d.report_rss:
                mib = procs.MIB
                add(name, rss_cell, f"{label} · at 1st done", "rss_start", rnd, d.rss_start / mib)
                add(name, rss_cell, f"{label} · peak", "rss_peak", rnd, d.rss_peak / mib)
                add(name, rss_cell, f"{label} · at Nth done", "rss_end", rnd, d.rss_end / mib)
            self.results.detail.append(
                {"system": name, "cell": cell, "round": rnd, "label": label, "drain": d.__dict__}
            )
            self.say(rnd, name, f"{cell} {escape(f'[{label}]')}: {d.summary()}")


def _settings_doc(settings: Settings) -> dict[str, Any]:
    return {
        "jobs": settings.jobs,
        "rounds": settings.rounds,
        "systems": list(settings.only),
        "latency_samples": settings.latency_samples,
        "latency_warmup": settings.latency_warmup,
        "latency_gap_s": settings.latency_gap_s,
        "per_core_processes": settings.per_core,
        "cores": CORES,
        "raw_batch_sizes": list(settings.raw_batch_sizes),
        "poll_s": settings.poll_s,
        "rss_sample_s": settings.rss_sample_s,
        "drain_deadline_s": settings.drain_deadline,
        "lean_jobs": settings.lean_jobs,
        "scale_jobs": settings.scale_jobs,
        "scale_counts": list(settings.scale_counts),
        "dashboard_rows": settings.dashboard_rows,
        "cells": list(settings.cells) or list(cells.CELLS),
        "run_id": settings.run_id,
    }
