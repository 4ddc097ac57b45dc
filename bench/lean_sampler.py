"""An opt-in sampler for the lean-table cell: the claim index's shape over the run.

Why it exists: the claim index's size after the final VACUUM is a high-water mark (a btree file
never shrinks), so the figure alone does not say why it grew. With ``BENCH_LEAN_SAMPLE=path``
the cell samples, every ``EVERY_S`` on a connection of its own, ``pgstatindex`` of the claim
index (leaf, deleted and empty pages, leaf density), its size, ``x_job_claimable``'s rows,
dead tuples and vacuum counts, and the oldest ``backend_xmin`` in the database (its age in
transactions, with the holder's state and query), and writes them as CSV to ``path``.

What it is not: part of the cell's figures (it reports nothing itself), nor a monitor for
production (``pgstattuple`` reads every page of the index).
"""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

EVERY_S = 0.5
COLUMNS = (
    "t", "size", "leaf_pages", "deleted_pages", "empty_pages", "internal_pages",
    "avg_leaf_density", "rows", "n_dead_tup", "autovacuum_count", "vacuum_count",
    "xmin_age", "xmin_state", "xmin_query",
)  # fmt: skip


def _sample(conn: psycopg.Connection[Any], index: str) -> list[Any]:
    conn.execute("select pg_stat_clear_snapshot()")
    idx = conn.execute(
        "select pg_relation_size(%(i)s::regclass), leaf_pages, deleted_pages, empty_pages,"
        " internal_pages, avg_leaf_density from pgstatindex(%(i)s)",
        {"i": index},
    ).fetchone()
    tab = conn.execute(
        "select (select count(*) from x_job_claimable), n_dead_tup, autovacuum_count,"
        " vacuum_count from pg_stat_user_tables where relname = 'x_job_claimable'"
    ).fetchone()
    holder = conn.execute(
        "select age(backend_xmin), state, left(query, 60) from pg_stat_activity"
        " where datname = current_database() and backend_xmin is not null"
        " and pid <> pg_backend_pid() order by age(backend_xmin) desc limit 1"
    ).fetchone()
    return [*(idx or ()), *(tab or ()), *(holder or (None, None, None))]


class Sampler:
    """Samples until ``stop()``; the CSV is written as it goes."""

    def __init__(self, dsn: str, path: Path, index: str) -> None:
        self.dsn = dsn
        self.path = path
        self.index = index
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("create extension if not exists pgstattuple")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        t0 = time.perf_counter()
        with (
            psycopg.connect(self.dsn, autocommit=True) as conn,
            self.path.open("w", newline="") as f,
        ):
            out = csv.writer(f)
            out.writerow(COLUMNS)
            while not self._stop.wait(EVERY_S):
                out.writerow([f"{time.perf_counter() - t0:.2f}", *_sample(conn, self.index)])
                f.flush()
