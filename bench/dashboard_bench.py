"""The dashboard on a big table: how long the overview takes with 1,000,000 rows in ``x_jobs``,
and the query plans of the reads behind it (``python -m bench.dashboard_bench [--rows N]``).

Why it exists: the overview and ``/metrics`` run every few seconds against a table that is
nearly all done rows; they must stay index scans, not sequential scans of ``x_jobs``, and use
only indexes a settle of a finished job does not change (migrations 0012 and 0014: the claim
index, the suspended and dead-letter indexes, ``x_job_leases``, ``x_job_counts``). This fills a
fresh bench database in one INSERT ... SELECT (97% done over the last 11 days, 1% dead, the rest
ready, scheduled, running, sleeping and waiting, across 8 queues; each running job with its
lease row, as a claim writes it; the per-minute counts of the finished rows as 16 worker
connections would have written them), serves the real dashboard (the CLI, a subprocess), times
GET / and prints the median, p95 and the EXPLAIN (ANALYZE, BUFFERS) of each statement.

What it is not: a load test of many concurrent viewers.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid

from ujobs_bridge.db import schema
from ujobs_bridge.db.sql import QUERIES

from . import pg

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
       now() - (i %% 2592000) * interval '1 second',
       now() - (i %% 2592000) * interval '1 second',
       case when s.state in ('done', 'dead') then now() - (i %% 2592000) * interval '1 second' end,
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
QUERIES_SHOWN = ("observe_depth", "observe_finished_per_minute", "observe_outbox_lag")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()
        assert response.status == 200
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    name = f"ujb_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}_dashboard"
    dsn = pg.create(name)
    proc = None
    try:
        schema.upgrade(dsn)
        with pg.connect(dsn) as conn:
            started = time.perf_counter()
            conn.execute(FILL, {"rows": args.rows})  # type: ignore[arg-type]
            for statement in BESIDE:
                conn.execute(statement)  # type: ignore[arg-type]
            for table in ("x_jobs", "x_job_leases", "x_job_counts"):
                conn.execute(f"vacuum analyze {table}")  # type: ignore[arg-type]
            print(f"filled {args.rows:,} rows in {time.perf_counter() - started:.1f}s")
            for row in conn.execute(
                "select state, count(*) from x_jobs group by state order by state"
            ).fetchall():
                print(f"  {row[0]:<9} {row[1]:>9,}")
            for block in QUERIES_SHOWN:
                plan = conn.execute(
                    "explain (analyze, buffers, costs off) " + QUERIES[block],  # type: ignore[operator]
                    {"now": None, "minutes": 60},
                ).fetchall()
                print(f"\n-- {block}")
                print("\n".join(row[0] for row in plan))
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        proc = subprocess.Popen(
            [sys.executable, "-m", "ujobs_bridge", "dashboard", "--port", str(port),
             "--dsn", pg.url_for(name), "--loglevel", "WARNING"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                get(url + "healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for _ in range(3):
            get(url)  # warm the pool and the caches
        timings = sorted(get(url) for _ in range(args.requests))
        p95 = timings[int(len(timings) * 0.95) - 1]
        print(
            f"\nGET / with {args.rows:,} rows: median {statistics.median(timings):.1f} ms, "
            f"p95 {p95:.1f} ms, max {timings[-1]:.1f} ms ({args.requests} requests)"
        )
        metrics = sorted(get(url + "metrics") for _ in range(10))
        print(f"GET /metrics: median {statistics.median(metrics):.1f} ms")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        pg.drop(name)


if __name__ == "__main__":
    main()
