-- 0011_observe: indexes for the reads an operator's screens and scrapes make (the dashboard's
-- overview, /metrics, `health`), so they stay index scans on a table of millions of done rows.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py (a plain CREATE
-- INDEX: it blocks writes to x_jobs while it builds; on a very large table create them
-- CONCURRENTLY by hand first, with these names, and this migration's IF NOT EXISTS skips them).

-- Rows not finished, and dead letters, by queue and state: depth per queue and state, the
-- oldest ready job, without reading done and cancelled rows (usually nearly all of them).
create index if not exists x_jobs_open_idx on x_jobs (queue, state, run_at)
    where state in ('ready', 'running', 'sleeping', 'waiting', 'dead');

-- Finished rows by when they finished: throughput and failures over the last hour.
create index if not exists x_jobs_finished_idx on x_jobs (finished_at)
    where finished_at is not null;
