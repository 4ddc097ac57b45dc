"""``python -m bench.soak``: the chaos soak (see ``bench/soak/__init__.py``)::

    python -m bench.soak                      # 10 minutes, every fault kind at least 5 times
    python -m bench.soak --small              # the CI profile: 75 s, every kind once
    python -m bench.soak --duration 120 --min-each 2 --seed 7 --json-out soak.json

Exit code: 0 when every loss column is zero (and every fault kind ran as often as asked),
1 otherwise, 130 when interrupted. ``SOAK_LOGLEVEL=INFO`` makes the processes' logs (kept in
the log folder when the run fails, or in ``--log-dir``) more talkative.

What it is not: the throughput bench (``python -m bench``).
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from pathlib import Path
from types import FrameType

from rich.console import Console

from .run import Soak
from .settings import SoakSettings

WIDE = 220


def parse(argv: list[str] | None = None) -> SoakSettings:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds of faults and load (600; --small: 75)"
    )
    parser.add_argument(
        "--small", action="store_true", help="the CI profile: every fault kind once, lower rates"
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="the fault plan and the workloads' mix (1)"
    )
    parser.add_argument(
        "--min-each",
        type=int,
        default=None,
        help="each fault kind at least N times (5; --small: 1)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds allowed to settle after the run (180; --small: 120)",
    )
    parser.add_argument(
        "--lease", type=float, default=None, help="the workers' --lease (10; --small: 4)"
    )
    parser.add_argument("--log-dir", type=Path, default=None, help="keep every log and record here")
    parser.add_argument(
        "--json-out", type=Path, default=None, help="write every figure as JSON here"
    )
    args = parser.parse_args(argv)
    base = SoakSettings.small(seed=args.seed) if args.small else SoakSettings(seed=args.seed)
    changes: dict[str, object] = {"log_dir": args.log_dir, "json_out": args.json_out}
    for flag, name in (
        ("duration", "duration_s"),
        ("min_each", "min_each"),
        ("settle", "settle_s"),
        ("lease", "lease_s"),
    ):
        value = getattr(args, flag)
        if value is not None:
            changes[name] = value
    settings = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    if (
        settings.min_each < 1
        or settings.duration_s <= 0
        or settings.settle_s <= 0
        or settings.lease_s <= 0
    ):
        parser.error("--duration, --min-each, --settle and --lease must be positive")
    return settings


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    console = Console(width=None if sys.stdout.isatty() else WIDE)
    soak = Soak(settings, console)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        soak.interrupted.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return soak.run()


if __name__ == "__main__":
    sys.exit(main())
