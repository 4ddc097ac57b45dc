"""``python -m conformance``: run Celery's integration tests on Celery+Redis and on the bridge.

Usage (from the repository root, in the project's virtualenv)::

    python -m conformance                      # both targets, both files, side by side
    python -m conformance --select "chain and not stamp"   # a subset (pytest -k)
    python -m conformance --only bridge --files tasks      # one target, one file
    python -m conformance --per-test 60 --budget 2400      # per-test cap, global budget (s)

Needs: the local Redis (``--redis``, default 127.0.0.1:6379; the run empties its four
databases starting at ``--redis-db``, default 10), Postgres for the bridge run
(``UJOBS_TEST_ADMIN_DSN``, default postgresql://postgres@127.0.0.1:5432/postgres; a database is
created for the run and dropped after), ``pydantic`` (Celery's tasks module imports it) and
network access to PyPI the first time (the sdist is cached; see ``sdist.cache_dir``).

What it is not: part of the test suite in ``tests/`` (it takes ~20 minutes and a Redis).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import shutil
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from . import report, runner, sdist

RESULTS = Path(__file__).resolve().parent / "results"
FILE_ALIASES = {"tasks": "t/integration/test_tasks.py", "canvas": "t/integration/test_canvas.py"}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.split("\n")[0])
    p.add_argument("--select", "-k", help="pytest -k expression: run a subset")
    p.add_argument("--only", choices=("celery", "bridge"), help="run one target only")
    p.add_argument(
        "--files",
        nargs="+",
        default=["tasks", "canvas"],
        help="test files: tasks, canvas, or paths under t/integration (default: both)",
    )
    p.add_argument(
        "--per-test", type=float, default=60.0, help="per-test timeout in seconds (default 60)"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=2400.0,
        help="global budget per target in seconds (default 2400); a run still going is cut",
    )
    p.add_argument("--serial", action="store_true", help="run the targets one after the other")
    p.add_argument("--redis", default="127.0.0.1:6379", help="host:port of the local Redis")
    p.add_argument(
        "--redis-db",
        type=int,
        default=10,
        help="first of the 4 Redis databases the run owns and empties (default 10)",
    )
    p.add_argument(
        "--version", help="celery version to fetch tests for (default: the installed one)"
    )
    p.add_argument(
        "--keep-trees", action="store_true", help="keep the run's test trees (for debugging)"
    )
    return p.parse_args(argv)


@contextlib.contextmanager
def _only_run() -> Iterator[None]:
    """One invocation at a time: the runs share the Redis databases they empty."""
    path = sdist.cache_dir() / "run.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"another `python -m conformance` is running (lock: {path})") from None
        yield


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    with _only_run():
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    version = args.version or sdist.celery_version()
    cache = sdist.cache_dir() / f"celery-{version}"
    started = time.monotonic()
    tarball = sdist.download(version, sdist.cache_dir())
    src = sdist.extract(tarball, cache)
    host, _, port_text = args.redis.partition(":")
    port = int(port_text or 6379)
    files = tuple(FILE_ALIASES.get(f, f) for f in args.files)
    names = [args.only] if args.only else ["celery", "bridge"]
    runner.flush_redis(host, port, [args.redis_db + i for i in range(4)])
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = RESULTS / stamp
    targets = []
    for name in names:
        tree = sdist.run_tree(src, cache / "runs" / stamp / name, name)
        db = args.redis_db + (0 if name == "celery" else 2)
        targets.append(
            runner.prepare(
                name,
                tree,
                out_dir,
                redis_host=host,
                redis_port=port,
                redis_db=db,
                per_test_s=args.per_test,
                select=args.select,
                files=files,
            )
        )
    print(
        f"celery {version}: tests from {tarball.name}, trees under {cache / 'runs' / stamp}",
        flush=True,
    )
    if args.serial:
        for t in targets:
            print(f"running {t.name} ... (log: {t.log})", flush=True)
            runner.start(t)
            runner.wait([t], args.budget)
    else:
        for t in targets:
            print(f"running {t.name} ... (log: {t.log})", flush=True)
            runner.start(t)
        runner.wait(targets, args.budget)
    results = {t.name: runner.outcomes(t.out) for t in targets}
    label = {"celery": "Celery+Redis", "bridge": "bridge"}
    meta = {
        "celery_version": version,
        "select": args.select,
        "files": list(files),
        "per_test_s": args.per_test,
        "budget_s": args.budget,
        "total_s": round(time.monotonic() - started, 1),
        **{
            label[t.name]: {
                "elapsed": round(t.elapsed, 1),
                "cut": t.cut,
                "returncode": t.returncode,
                "log": str(t.log),
            }
            for t in targets
        },
    }
    text = report.render(results.get("celery"), results.get("bridge"), meta)
    print()
    print(text)
    print(f"\ntotal {meta['total_s']:.0f}s; results in {out_dir}")
    report.write_json(out_dir / "results.json", results.get("celery"), results.get("bridge"), meta)
    report.write_json(RESULTS / "latest.json", results.get("celery"), results.get("bridge"), meta)
    (out_dir / "report.txt").write_text(text + "\n")
    if not args.keep_trees:
        shutil.rmtree(cache / "runs" / stamp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
