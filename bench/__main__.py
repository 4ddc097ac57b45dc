"""``python -m bench``: measure ujobs-bridge, Celery (Redis, RabbitMQ) and the raw Postgres ceiling.

Why it exists: one command, one run, every figure and every target, so that a claim in the
docs can always be re-checked on the machine at hand::

    python -m bench                                   # N=20,000, 3 rounds, all systems
    python -m bench --only celery-redis,raw --rounds 1 --jobs 5000
    python -m bench --quick                           # smoke run, seconds
    python -m bench --only ujobs --cells steps --jobs 5000   # step overhead only
    python -m bench --only ujobs,raw --cells enqueue-producers --jobs 8000   # 8 producers
    python -m bench --only celery-compat,celery-redis,celery-rabbitmq \
        --cells delay-one,delay-concurrent,delay-tx,drain-shared   # the Celery-shaped cells
    python -m bench --only migrate --cells drain-broker     # migrate: Redis/RabbitMQ -> Postgres
    python -m bench --only ujobs --cells lean --lean-jobs 100000   # the lean-table cell
    python -m bench --only migrate,celery-redis,celery-rabbitmq \
        --cells drain-broker,drain-core                       # ... and x Celery's own drain
    python -m bench --only ujobs --cells scale --scale-jobs 5000 \
        --scale-svg docs/many-workers.svg                    # 1..32 worker processes
    python -m bench --only ujobs --cells dashboard          # dashboard pages at 1,000,000 rows
    python -m bench --json-out bench/results/run.json

Exit code: 0 when every cell ran, 1 when any cell failed (the tables still print), 130 when
interrupted. Targets that are missed do not change the exit code: this reports, it does not gate.

What it is not: a load test of a deployment; everything runs on this machine, on loopback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from . import cells, report
from .runner import Runner
from .settings import CORES, SYSTEMS, Settings

QUICK_JOBS = 500
WIDE = 150  # when piped to a file: wide enough that no figure label wraps


def parse(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--jobs", type=int, default=None, help="N jobs per drain/enqueue cell (default 20,000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds; the median is reported (default 3)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: N={QUICK_JOBS}, 1 round, 50 latency samples",
    )
    parser.add_argument(
        "--only", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}"
    )
    parser.add_argument(
        "--cells",
        default=",".join(cells.SELECTABLE),
        help=f"comma-separated subset of {','.join(cells.SELECTABLE)} (a drain brings its RSS "
        "figures; 'steps' is ujobs-bridge only)",
    )
    parser.add_argument(
        "--latency-samples",
        type=int,
        default=None,
        help="measured pick-ups per round (default 500)",
    )
    parser.add_argument(
        "--per-core",
        type=int,
        default=CORES,
        help=f"processes in the per-core drain (default {CORES})",
    )
    parser.add_argument(
        "--drain-deadline",
        type=float,
        default=None,
        help="seconds one drain may take (default 60 + N/100)",
    )
    parser.add_argument(
        "--lean-jobs",
        type=int,
        default=None,
        help="N of the lean-table cell (default 1,000,000; --quick: 20,000)",
    )
    parser.add_argument(
        "--scale-jobs",
        type=int,
        default=None,
        help="N of the many-workers cell (default 50,000; --quick: 2,000)",
    )
    parser.add_argument(
        "--scale-counts",
        default="1,2,4,8,16,32",
        help="worker process counts of the many-workers cell (default 1,2,4,8,16,32)",
    )
    parser.add_argument(
        "--scale-svg", type=Path, default=None, help="write the many-workers chart (SVG) here"
    )
    parser.add_argument(
        "--dashboard-rows",
        type=int,
        default=None,
        help="rows in x_jobs of the dashboard cell (default 1,000,000; --quick: 20,000)",
    )
    parser.add_argument(
        "--json-out", type=Path, default=None, help="write every figure as JSON here"
    )
    args = parser.parse_args(argv)
    only = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = [s for s in only if s not in SYSTEMS]
    if unknown or not only:
        parser.error(f"--only: unknown {unknown or 'empty list'}; choose from {','.join(SYSTEMS)}")
    picked = [c.strip() for c in args.cells.split(",") if c.strip()]
    bad = [c for c in picked if c not in cells.SELECTABLE]
    if bad or not picked:
        parser.error(
            f"--cells: unknown {bad or 'empty list'}; choose from {','.join(cells.SELECTABLE)}"
        )
    jobs = args.jobs if args.jobs is not None else (QUICK_JOBS if args.quick else 20_000)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    samples = (
        args.latency_samples if args.latency_samples is not None else (50 if args.quick else 500)
    )
    lean_jobs = (
        args.lean_jobs if args.lean_jobs is not None else (20_000 if args.quick else 1_000_000)
    )
    scale_jobs = (
        args.scale_jobs if args.scale_jobs is not None else (2_000 if args.quick else 50_000)
    )
    dashboard_rows = (
        args.dashboard_rows
        if args.dashboard_rows is not None
        else (20_000 if args.quick else 1_000_000)
    )
    if dashboard_rows < 1:
        parser.error("--dashboard-rows must be at least 1")
    try:
        scale_counts = tuple(int(c) for c in args.scale_counts.split(",") if c.strip())
    except ValueError:
        parser.error("--scale-counts: comma-separated whole numbers")
    if scale_jobs < 1 or not scale_counts or min(scale_counts) < 1:
        parser.error("--scale-jobs and every --scale-counts must be at least 1")
    if jobs < 1 or rounds < 1 or samples < 1 or args.per_core < 1 or lean_jobs < 1:
        parser.error(
            "--jobs, --rounds, --latency-samples, --per-core and --lean-jobs must be at least 1"
        )
    return Settings(
        jobs=jobs,
        rounds=rounds,
        only=only,
        latency_samples=samples,
        latency_warmup=5 if args.quick else 20,
        per_core=args.per_core,
        drain_deadline_s=args.drain_deadline,
        json_out=args.json_out,
        lean_jobs=lean_jobs,
        scale_jobs=scale_jobs,
        scale_counts=scale_counts,
        scale_svg=args.scale_svg,
        dashboard_rows=dashboard_rows,
        dashboard_requests=5 if args.quick else 20,
        cells=tuple(cells.SELECTABLE[c] for c in picked),
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    console = Console(width=None if sys.stdout.isatty() else WIDE)
    console.print(
        f"[bold]ujobs-bridge bench[/bold] run {settings.run_id}: N={settings.jobs:,} jobs, "
        f"{settings.rounds} round(s), systems {', '.join(settings.only)}, cells "
        f"{', '.join(k for k, v in cells.SELECTABLE.items() if settings.wants(v))}, {CORES} cores, "
        f"per-core drain = {settings.per_core} processes, latency {settings.latency_samples} "
        f"samples after {settings.latency_warmup} warm-ups"
        + (
            f", many workers N={settings.scale_jobs:,} at "
            f"{','.join(map(str, settings.scale_counts))} processes"
            if settings.wants(cells.SCALE)
            else ""
        )
    )
    runner = Runner(settings, console)
    t0 = time.perf_counter()
    interrupted = False
    try:
        results = runner.run()
    except KeyboardInterrupt:
        interrupted = True
        results = runner.results
        console.print("[red]interrupted: workers stopped, bench databases and keys removed[/red]")
    console.print(f"\nran in {time.perf_counter() - t0:.0f}s\n")
    found = report.render(results, console)
    if settings.json_out is not None:
        results.write_json(
            settings.json_out,
            {
                "targets": [
                    {
                        "name": t.name,
                        "value": t.value,
                        "goal": t.goal,
                        "verdict": t.verdict,
                        "measured": Text.from_markup(t.measured).plain,
                        "spread": t.spread,
                    }
                    for t in found
                ]
            },
        )
        console.print(f"figures written to {settings.json_out}")
    if results.errors:
        console.print(f"worker logs kept in {runner.log_dir}")
    if interrupted:
        return 130
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
