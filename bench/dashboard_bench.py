"""The dashboard on a big table: how long its pages take with 1,000,000 rows in ``x_jobs``, and
the query plans of the reads behind them. The ``dashboard`` cell of ``python -m bench``
(``--cells dashboard --dashboard-rows N``); ``python -m bench.dashboard_bench [--rows N]`` runs
it alone and prints the plans.

Why it exists: the overview, ``/metrics``, the jobs list and a job's page run against a table
that is nearly all done rows; they must stay index scans, not sequential scans of ``x_jobs``, and
use only indexes a settle of a finished job does not change (migrations 0012, 0014, 0016: the
claim index, the suspended and dead-letter indexes, the creation-order index, ``x_job_leases``,
``x_job_counts``). This fills a fresh bench database in one INSERT ... SELECT (97% done over the
last 30 days, 1% dead, the rest ready, scheduled, running, sleeping and waiting, across 8
queues; each running job with its lease row, as a claim writes it; the per-minute counts of the
finished rows as 16 worker connections would have written them), serves the real dashboard (the
CLI, a subprocess), times each page (median, p95) and prints the EXPLAIN (ANALYZE, BUFFERS) of
each statement. The target: every page under ``TARGET_MS`` at 1,000,000 rows.

What it is not: a load test of many concurrent viewers.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

from ujobs_bridge._internal.db import schema
from ujobs_bridge._internal.db.sql import QUERIES

from . import pg

TARGET_MS = 200.0
FILL = """
insert into x_jobs (id, name, queue, input, state, attempt, max_attempts, run_at, created_at,
                    updated_at, finished_at, last_error, lease_token, lease_expires_at)
select gen_random_uuid(),
       'bench.task_' || (i %% 20),
       'q' || (i %% 8),
       '{"args": [1, 2], "kwargs": {}}'::jsonb,
       s.state,
       case when s.state in ('ready', 'sleeping', 'waiting') then 0 else 1 end,
       3,
       case when s.state = 'ready' and i %% 3 = 0 then now() + interval '1 hour'
            when s.state = 'sleeping' then now() + (i %% 3600) * interval '1 second'
            when s.state = 'waiting' then '9999-12-31 00:00:00+00'::timestamptz
            else now() - (i %% 1800) * interval '1 second' end,
       now() - (%(rows)s - i) * interval '2.592 seconds' * 1000000 / %(rows)s,
       now() - (%(rows)s - i) * interval '2.592 seconds' * 1000000 / %(rows)s,
       case when s.state in ('done', 'dead')
            then now() - (%(rows)s - i) * interval '2.592 seconds' * 1000000 / %(rows)s end,
       case when s.state = 'dead' then 'RuntimeError: bench' end,
       case when s.state = 'running' then gen_random_uuid() end,
       case when s.state = 'running' then now() + interval '5 minutes' end
  from generate_series(1, %(rows)s) as i,
       lateral (select case
           when i %% 100 < 97 then 'done'
           when i %% 100 = 97 then 'dead'
           when (i / 100) %% 10 < 6 then 'ready'
           when (i / 100) %% 10 = 6 then 'running'
           when (i / 100) %% 10 = 7 then 'sleeping'
           else 'waiting' end as state) as s
"""

# What the claims and settles would have written beside the rows: a lease per running job, and
# per-minute counts of finished jobs per queue for 16 worker connections (backends).
BESIDE = (
    """
insert into x_job_leases (job_id, token)
select id, lease_token from x_jobs where state = 'running'
""",
    """
insert into x_job_counts (minute, queue, backend, done, dead)
select date_trunc('minute', finished_at), queue, abs(hashtext(id::text)) % 16,
       count(*) filter (where state = 'done'), count(*) filter (where state = 'dead')
  from x_jobs
 where state in ('done', 'dead')
 group by 1, 2, 3
""",
)
PLAN_ARGS: dict[str, Any] = {
    "now": None, "minutes": 60, "state": None, "queue": None, "name_like": None, "ids": None,
    "since": None, "until": None, "limit": 50, "offset": 0, "before_at": None, "before_id": None,
}  # fmt: skip
PLANS = (
    ("observe_depth", {}),
    ("observe_finished_per_minute", {}),
    ("observe_outbox_lag", {}),
    ("job_list", {}),
    ("job_list", {"state": "dead"}),
    ("job_list", {"queue": "q3", "name_like": "bench.task\\_1%"}),
)


@dataclass
class DashboardResult:
    """Milliseconds per page (label -> sorted timings) at ``rows`` rows, and the plans."""

    rows: int
    pages: dict[str, list[float]] = field(default_factory=dict)
    plans: list[tuple[str, str]] = field(default_factory=list)
    fill_s: float = 0.0

    def median(self, label: str) -> float:
        return statistics.median(self.pages[label])

    def p95(self, label: str) -> float:
        timings = self.pages[label]
        return timings[max(0, int(len(timings) * 0.95) - 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url: str) -> tuple[float, str]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read().decode()
        assert response.status == 200, url
    return (time.perf_counter() - started) * 1000, body


def _fill(conn: Any, rows: int) -> None:
    conn.execute(FILL, {"rows": rows})
    for statement in BESIDE:
        conn.execute(statement)
    for table in ("x_jobs", "x_job_leases", "x_job_counts"):
        conn.execute(f"vacuum analyze {table}")


def _plans(conn: Any) -> list[tuple[str, str]]:
    out = []
    for block, extra in PLANS:
        plan = conn.execute(
            "explain (analyze, buffers, costs off) " + QUERIES[block], {**PLAN_ARGS, **extra}
        ).fetchall()
        title = block + (f" {extra}" if extra else "")
        out.append((title, "\n".join(row[0] for row in plan)))
    return out


def pages(conn: Any) -> list[tuple[str, str]]:
    """(label, path) of every page timed: the overview, the jobs list and its filters, one
    job's page, the next page of the list (its own "older" link) and ``/metrics``."""
    some = conn.execute("select id from x_jobs where state = 'dead' limit 1").fetchone()[0]
    since = conn.execute("select (now() - interval '2 days')::date").fetchone()[0]
    return [
        ("overview /", "/"),
        ("jobs list /jobs", "/jobs"),
        ("jobs ?state=dead", "/jobs?state=dead"),
        ("jobs ?state=waiting", "/jobs?state=waiting"),
        ("jobs ?queue=q3", "/jobs?queue=q3"),
        ("jobs ?name=bench.task_1*", "/jobs?name=bench.task_1*"),
        ("jobs ?task_id=<id>", f"/jobs?task_id={some}"),
        ("jobs ?since=..&until=..", f"/jobs?since={since}T00:00&until={since}T06:00"),
        ("job page /jobs/<id>", f"/jobs/{some}"),
        ("/metrics", "/metrics"),
    ]


OLDER = re.compile(r'href="(/jobs\?[^"]*)">older')


def measure(rows: int, requests: int, *, show: Any = None) -> DashboardResult:
    """Fill a fresh database with ``rows`` jobs, serve the dashboard, time every page
    ``requests`` times (after 3 warm-ups); ``show(text)`` gets progress and the plans."""
    say = show or (lambda text: None)
    name = f"ujb_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}_dashboard"
    dsn = pg.create(name)
    proc = None
    result = DashboardResult(rows)
    try:
        schema.upgrade(dsn)
        with pg.connect(dsn) as conn:
            started = time.perf_counter()
            _fill(conn, rows)
            result.fill_s = time.perf_counter() - started
            say(f"filled {rows:,} rows in {result.fill_s:.1f}s")
            result.plans = _plans(conn)
            paths = pages(conn)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "ujobs_bridge", "dashboard", "--port", str(port),
             "--dsn", pg.url_for(name), "--loglevel", "WARNING"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                fetch(base + "/healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        _, listing = fetch(base + "/jobs")
        older = OLDER.search(listing)
        if older is not None:
            paths.append(("jobs, next page (older →)", older.group(1).replace("&amp;", "&")))
        paths.append(("jobs ?offset=5000", "/jobs?offset=5000"))
        for label, path in paths:
            for _ in range(3):
                fetch(base + path)  # warm the pool and the caches
            result.pages[label] = sorted(fetch(base + path)[0] for _ in range(requests))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        pg.drop(name)
    return result


def summary(result: DashboardResult) -> str:
    lines = [f"{'page':<30} {'median ms':>10} {'p95 ms':>9}  median < {TARGET_MS:.0f} ms"]
    for label in result.pages:
        p95 = result.p95(label)
        verdict = "ok" if result.median(label) < TARGET_MS else "MISSED"
        lines.append(f"{label:<30} {result.median(label):>10.1f} {p95:>9.1f}  {verdict}")
    return "\n".join(lines)


def targets(results: Any) -> list[Any]:
    """One target per page timed in the dashboard cell: its median under ``TARGET_MS`` (the p95
    beside it; on a loaded machine the tail is the neighbours' more than the page's)."""
    from . import cells
    from .targets import Target, _verdict

    out = []
    rows = results.settings.get("dashboard_rows", 0)
    for (system, cell, label), row in results.rows.items():
        if cell != cells.DASHBOARD or not label.endswith(" · median"):
            continue
        page = label.removesuffix(" · median")
        tail = results.rows.get((system, cell, f"{page} · p95"))
        out.append(
            Target(
                f"{system} dashboard at {rows:,} rows: {page} (median ms)",
                f"{row.median:.1f} ms",
                f"p95 {tail.median:.1f} ms" if tail is not None else "",
                f"≤ {TARGET_MS:g}",
                _verdict(row.median, None, TARGET_MS),
                row.median,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard_bench")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--no-plans", action="store_true", help="do not print the query plans")
    args = parser.parse_args()
    result = measure(args.rows, args.requests, show=print)
    if not args.no_plans:
        for title, plan in result.plans:
            print(f"\n-- {title}\n{plan}")
    print(f"\nwith {args.rows:,} rows in x_jobs, {args.requests} requests per page:")
    print(summary(result))


if __name__ == "__main__":
    main()
